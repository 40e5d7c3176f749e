/* libFuzzer target for the JPEG reader (core/import/jpeg.c: header, EXIF orientation, CMYK,
 * progressive scans, DCT scaling): the input is written to a file and decoded as the image-folder
 * import and predict decode it (header probe, then gray and RGB planes stretched to 8x8, and the
 * RGB centre cropped after scaling the shorter side to 6). Any input must give a clean error or a
 * result, never a crash or a leak. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/import/import_internal.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write_file("jpg", data, size);
    const struct nl_resize crop = {.shorter = 6, .crop_w = 4, .crop_h = 4};
    struct nl_error err = {0};
    struct nl_image_info info;
    uint8_t out[3 * 8 * 8];

    if (!path)
        return 0;
    if (nl_image_probe(path, &info, &err) == 0) {
        nl_image_read(path, 1, NULL, 8, 8, out, NULL, &err);
        nl_image_read(path, 3, NULL, 8, 8, out, NULL, &err);
        nl_image_read(path, 3, &crop, 4, 4, out, NULL, &err);
    }
    return 0;
}
