/* SHA-256 and HMAC-SHA256. See sha256.h; checked against the FIPS 180-4 and RFC 4231 vectors in
 * tests/test_wire.c. */
#include "sha256.h"

#include <string.h>

static const uint32_t k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr(uint32_t x, int n)
{
    return (x >> n) | (x << (32 - n));
}

static void block(uint32_t h[8], const unsigned char *p)
{
    uint32_t w[64], a, b, c, d, e, f, g, hh;

    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = hh + s1 + ch + k[i] + w[i];
        uint32_t s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = s0 + maj;
        hh = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
}

void nl_sha256_init(struct nl_sha256 *s)
{
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, iv, sizeof iv);
    s->bytes = 0;
    s->fill = 0;
}

void nl_sha256_update(struct nl_sha256 *s, const void *data, size_t n)
{
    const unsigned char *p = data;

    s->bytes += n;
    if (s->fill > 0) {
        size_t take = 64 - s->fill < n ? 64 - s->fill : n;
        memcpy(s->buf + s->fill, p, take);
        s->fill += take;
        p += take;
        n -= take;
        if (s->fill < 64)
            return;
        block(s->h, s->buf);
        s->fill = 0;
    }
    for (; n >= 64; p += 64, n -= 64)
        block(s->h, p);
    memcpy(s->buf, p, n);
    s->fill = n;
}

void nl_sha256_final(struct nl_sha256 *s, unsigned char out[NL_SHA256_SIZE])
{
    const uint64_t bits = s->bytes * 8;

    s->buf[s->fill++] = 0x80;
    if (s->fill > 56) {
        memset(s->buf + s->fill, 0, 64 - s->fill);
        block(s->h, s->buf);
        s->fill = 0;
    }
    memset(s->buf + s->fill, 0, 56 - s->fill);
    for (int i = 0; i < 8; i++)
        s->buf[56 + i] = (unsigned char)(bits >> (56 - 8 * i));
    block(s->h, s->buf);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (unsigned char)(s->h[i] >> 24);
        out[4 * i + 1] = (unsigned char)(s->h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(s->h[i] >> 8);
        out[4 * i + 3] = (unsigned char)s->h[i];
    }
}

void nl_sha256(unsigned char out[NL_SHA256_SIZE], const void *data, size_t n)
{
    struct nl_sha256 s;
    nl_sha256_init(&s);
    nl_sha256_update(&s, data, n);
    nl_sha256_final(&s, out);
}

void nl_hmac_sha256(unsigned char out[NL_SHA256_SIZE], const void *key, size_t keylen,
                    const void *msg, size_t n)
{
    unsigned char k0[64] = {0}, pad[64], inner[NL_SHA256_SIZE];
    struct nl_sha256 s;

    if (keylen > 64)
        nl_sha256(k0, key, keylen);
    else if (keylen > 0)
        memcpy(k0, key, keylen);
    for (int i = 0; i < 64; i++)
        pad[i] = k0[i] ^ 0x36;
    nl_sha256_init(&s);
    nl_sha256_update(&s, pad, 64);
    nl_sha256_update(&s, msg, n);
    nl_sha256_final(&s, inner);
    for (int i = 0; i < 64; i++)
        pad[i] = k0[i] ^ 0x5c;
    nl_sha256_init(&s);
    nl_sha256_update(&s, pad, 64);
    nl_sha256_update(&s, inner, sizeof inner);
    nl_sha256_final(&s, out);
}

int nl_mem_equal_ct(const void *a, const void *b, size_t n)
{
    const volatile unsigned char *x = a, *y = b;
    unsigned char d = 0;

    for (size_t i = 0; i < n; i++)
        d |= x[i] ^ y[i];
    return d == 0;
}
