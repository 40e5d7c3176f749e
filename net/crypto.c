/* Hashes, MACs and key derivation over libcrypto. See net/crypto.h. */
#include "net/crypto.h"

#include <stdio.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>

void nl_sha256(unsigned char out[NL_SHA256_SIZE], const void *data, size_t n)
{
    unsigned int len = NL_SHA256_SIZE;
    /* EVP_Digest fails only when out of memory; the hash is then all zeros, which matches no
     * content, so a cache entry or an upload is not trusted on it. */
    if (EVP_Digest(data, n, out, &len, EVP_sha256(), NULL) != 1)
        for (int i = 0; i < NL_SHA256_SIZE; i++)
            out[i] = 0;
}

void nl_sha256_hex(char out[2 * NL_SHA256_SIZE + 1], const void *data, size_t n)
{
    unsigned char d[NL_SHA256_SIZE];
    nl_sha256(d, data, n);
    for (int i = 0; i < NL_SHA256_SIZE; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

void nl_hmac_sha256(unsigned char out[NL_SHA256_SIZE], const void *key, size_t keylen,
                    const void *msg, size_t n)
{
    unsigned int len = NL_SHA256_SIZE;
    /* As for nl_sha256: a failed HMAC is all zeros, which no peer's proof matches. */
    if (!HMAC(EVP_sha256(), key, (int)keylen, msg, n, out, &len))
        for (int i = 0; i < NL_SHA256_SIZE; i++)
            out[i] = 0;
}

int nl_hkdf_sha256(unsigned char *out, size_t outlen, const void *ikm, size_t ikmlen,
                   const void *salt, size_t saltlen, const void *info, size_t infolen)
{
    EVP_PKEY_CTX *k = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
    size_t got = outlen;
    int ok = k && EVP_PKEY_derive_init(k) == 1 && EVP_PKEY_CTX_set_hkdf_md(k, EVP_sha256()) == 1 &&
             EVP_PKEY_CTX_set1_hkdf_salt(k, salt, (int)saltlen) == 1 &&
             EVP_PKEY_CTX_set1_hkdf_key(k, ikm, (int)ikmlen) == 1 &&
             EVP_PKEY_CTX_add1_hkdf_info(k, info, (int)infolen) == 1 &&
             EVP_PKEY_derive(k, out, &got) == 1 && got == outlen;
    EVP_PKEY_CTX_free(k);
    return ok ? 0 : -1;
}

int nl_mem_equal_ct(const void *a, const void *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}
