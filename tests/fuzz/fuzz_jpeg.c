/* libFuzzer target for the JPEG reader (core/import/jpeg.c: header, EXIF orientation, CMYK,
 * progressive scans, DCT scaling): the input is written to a file and decoded as the image-folder
 * import and predict decode it (header probe, then gray and RGB planes stretched to 8x8, and the
 * RGB centre cropped after scaling the shorter side to 6). Any input must give a clean error or a
 * result, never a crash or a leak. */
#include <stdint.h>

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_image("jpg", data, size);
    return 0;
}
