/* Training-time augmentation: random left-right mirroring and random shifts ("crop:P": pad by P
 * pixels of 0, the mean after normalisation, and crop back to the original size at a random
 * offset), applied in place to normalised training batches by each trainer thread with its own
 * generator. Evaluation and prediction never augment. */
#include "nnlab/dataset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int nl_augment_parse(struct nl_augment *a, const char *text, struct nl_error *err)
{
    char buf[128];
    char *save = NULL;

    memset(a, 0, sizeof *a);
    if (!text || !*text || strcmp(text, "none") == 0)
        return 0;
    if (strlen(text) >= sizeof buf)
        return nl_error_set(err, NL_EINVAL, "augmentation '%.40s...' is too long", text);
    strcpy(buf, text);
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (strcmp(tok, "flip") == 0) {
            a->flip = 1;
        } else if (strncmp(tok, "crop:", 5) == 0) {
            char *end;
            long v = strtol(tok + 5, &end, 10);
            if (end == tok + 5 || *end || v < 1 || v > 64)
                return nl_error_set(err, NL_EINVAL,
                                    "augmentation '%s': want crop:P with P from 1 to 64 pixels",
                                    tok);
            a->crop = (int)v;
        } else {
            return nl_error_set(err, NL_EINVAL,
                                "unknown augmentation '%s' (known: flip, crop:P, none)", tok);
        }
    }
    return 0;
}

int nl_augment_active(const struct nl_augment *a)
{
    return a && (a->flip || a->crop > 0);
}

/* One plane (h, w) shifted by (dy, dx) with zeros entering, and mirrored when flip. */
static void move_plane(float *p, int h, int w, int dy, int dx, int flip)
{
    if (flip)
        for (int y = 0; y < h; y++) {
            float *row = p + (size_t)y * w;
            for (int i = 0, j = w - 1; i < j; i++, j--) {
                float t = row[i];
                row[i] = row[j];
                row[j] = t;
            }
        }
    if (dx == 0 && dy == 0)
        return;
    /* out(y, x) = in(y + dy, x + dx); copy in the order that never reads a written value. */
    int y0 = dy > 0 ? 0 : h - 1, ystep = dy > 0 ? 1 : -1;
    for (int k = 0; k < h; k++) {
        int y = y0 + k * ystep, sy = y + dy;
        float *row = p + (size_t)y * w;
        if (sy < 0 || sy >= h) {
            memset(row, 0, (size_t)w * sizeof *row);
            continue;
        }
        const float *src = p + (size_t)sy * w;
        if (dx >= 0) {
            for (int x = 0; x < w; x++)
                row[x] = x + dx < w ? src[x + dx] : 0.0f;
        } else {
            for (int x = w - 1; x >= 0; x--)
                row[x] = x + dx >= 0 ? src[x + dx] : 0.0f;
        }
    }
}

void nl_augment_batch(const struct nl_augment *a, struct nl_shape shape, float *x, int n,
                      struct nl_rng *rng)
{
    const size_t plane = (size_t)shape.h * shape.w;

    if (!nl_augment_active(a))
        return;
    for (int i = 0; i < n; i++) {
        int flip = a->flip && shape.w > 1 ? (int)(nl_rng_next(rng) >> 63) : 0;
        int dy = 0, dx = 0;
        if (a->crop > 0) {
            uint32_t span = 2u * (uint32_t)a->crop + 1;
            dy = shape.h > 1 ? (int)nl_rng_below(rng, span) - a->crop : 0;
            dx = shape.w > 1 ? (int)nl_rng_below(rng, span) - a->crop : 0;
        }
        for (int c = 0; c < shape.c; c++)
            move_plane(x + ((size_t)i * shape.c + c) * plane, shape.h, shape.w, dy, dx, flip);
    }
}
