/* libFuzzer target for the PNG reader: the input is written to a file and decoded as the
 * PNG-folder import and predict decode it (header probe, then gray and RGB planes resized to
 * 8x8). Any input must give a clean error or a result, never a crash or a leak. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/import_internal.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write_file("png", data, size);
    struct nl_error err = {0};
    float out[3 * 8 * 8];
    uint32_t w, h;
    int color;

    if (!path)
        return 0;
    if (nl_png_probe(path, &w, &h, &color, &err) == 0) {
        nl_png_read_planes(path, 1, 8, 8, out, &err);
        nl_png_read_planes(path, 3, 8, 8, out, &err);
    }
    return 0;
}
