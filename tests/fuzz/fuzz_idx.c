/* libFuzzer target for the IDX reader: the input's first byte chooses where it is cut into an
 * images file and a labels file (either may be gzip), which are imported into an in-memory store
 * and removed again. Any input must give a clean error or a dataset, never a crash or a leak. */
#include <stdint.h>

#include "fuzz_util.h"
#include "nnlab/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct nl_store *s = fuzz_store();
    struct nl_import_opts o = {.seed = 1};
    struct nl_error err = {0};
    const char *paths[2];
    size_t cut;

    if (size < 1)
        return 0;
    cut = (size - 1) * data[0] / 255;
    o.val_fraction = data[0] & 1 ? 0.25f : 0;
    paths[0] = fuzz_write_file("images", data + 1, cut);
    paths[1] = fuzz_write_file("labels", data + 1 + cut, size - 1 - cut);
    if (!paths[0] || !paths[1])
        return 0;
    if (nl_import_idx(s, "fuzz", paths, 2, &o, &err) == 0)
        nl_dataset_remove(s, "fuzz", &err);
    return 0;
}
