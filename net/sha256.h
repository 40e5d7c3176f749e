/* SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), self-contained, for the wire protocol's
 * challenge-response. Private to net/ and its tests. */
#ifndef NNLAB_NET_SHA256_H
#define NNLAB_NET_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define NL_SHA256_SIZE 32

struct nl_sha256 {
    uint32_t h[8];
    uint64_t bytes;        /* message bytes hashed so far */
    unsigned char buf[64]; /* the partial block */
    size_t fill;           /* bytes in buf */
};

void nl_sha256_init(struct nl_sha256 *s);
void nl_sha256_update(struct nl_sha256 *s, const void *data, size_t n);
void nl_sha256_final(struct nl_sha256 *s, unsigned char out[NL_SHA256_SIZE]);
void nl_sha256(unsigned char out[NL_SHA256_SIZE], const void *data, size_t n);

/* out = HMAC-SHA256(key, msg). */
void nl_hmac_sha256(unsigned char out[NL_SHA256_SIZE], const void *key, size_t keylen,
                    const void *msg, size_t n);

/* 1 when a and b are equal, in time that does not depend on where they differ. */
int nl_mem_equal_ct(const void *a, const void *b, size_t n);

#endif
