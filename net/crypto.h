/* Hashes, MACs and key derivation for the cluster code, all from OpenSSL's libcrypto: content
 * hashes of partitions and binaries, the handshake's HMAC, and the keys of sealed connections
 * (net/wire.c). Private to net/ and its tests. */
#ifndef NNLAB_NET_CRYPTO_H
#define NNLAB_NET_CRYPTO_H

#include <stddef.h>

#define NL_SHA256_SIZE 32

/* out = SHA-256(data). */
void nl_sha256(unsigned char out[NL_SHA256_SIZE], const void *data, size_t n);
/* out = the 64 lowercase hex digits of SHA-256(data), NUL-terminated. */
void nl_sha256_hex(char out[2 * NL_SHA256_SIZE + 1], const void *data, size_t n);
/* out = HMAC-SHA256(key, msg). */
void nl_hmac_sha256(unsigned char out[NL_SHA256_SIZE], const void *key, size_t keylen,
                    const void *msg, size_t n);
/* out (outlen bytes) = HKDF-SHA256 (RFC 5869) of ikm with salt and info: 0, or -1 when
 * libcrypto fails. */
int nl_hkdf_sha256(unsigned char *out, size_t outlen, const void *ikm, size_t ikmlen,
                   const void *salt, size_t saltlen, const void *info, size_t infolen);
/* 1 when a and b are equal, in time that does not depend on where they differ. */
int nl_mem_equal_ct(const void *a, const void *b, size_t n);

#endif
