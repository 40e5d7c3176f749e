/* Preloaded (LD_PRELOAD) into the nnlab workers of tests/test_cluster_sealed.c: a connection to
 * 127.0.0.1 at a port from LO to HI goes to port RELAY + (port - LO) instead, where
 * NNLAB_TEST_REDIRECT is "LO-HI:RELAY". The workers' mesh connections then pass through a relay
 * the test runs, which forwards them to where they were headed and may alter a byte on the way;
 * everything else the worker does is untouched. */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* glibc's, from <dlfcn.h> under _GNU_SOURCE, which would also turn connect's address argument
 * into a transparent union that this definition could not match. */
#ifndef RTLD_NEXT
#define RTLD_NEXT ((void *)-1l)
#endif

typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);

int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
    static connect_fn real;
    const char *spec = getenv("NNLAB_TEST_REDIRECT");
    int lo, hi, relay;

    if (!real) {
        void *sym = dlsym(RTLD_NEXT, "connect");
        memcpy(&real, &sym, sizeof real);
    }
    if (spec && sa && sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in) &&
        sscanf(spec, "%d-%d:%d", &lo, &hi, &relay) == 3) {
        struct sockaddr_in in;
        memcpy(&in, sa, sizeof in);
        const int port = ntohs(in.sin_port);
        if (in.sin_addr.s_addr == htonl(INADDR_LOOPBACK) && port >= lo && port <= hi) {
            in.sin_port = htons((uint16_t)(relay + port - lo));
            return real(fd, (const struct sockaddr *)&in, sizeof in);
        }
    }
    return real(fd, sa, len);
}
