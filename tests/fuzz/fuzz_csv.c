/* libFuzzer target for the CSV reader: the input is imported as a .csv file into an in-memory
 * store (with --skip-bad and a test split when its length is odd) and removed again. Any input
 * must give a clean error or a dataset, never a crash or a leak. */
#include <stdint.h>

#include "core/import/import_internal.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct nl_store *s = fuzz_store();
    struct nl_import_opts o = {.seed = 1, .skip_bad = (int)(size & 1)};
    struct nl_error err = {0};
    const char *path = fuzz_write_file("csv", data, size);

    if (!path)
        return 0;
    o.test_fraction = size & 1 ? 0.2f : 0;
    if (nl_import_csv(s, "fuzz", path, &o, &err) == 0)
        nl_dataset_remove(s, "fuzz", &err);
    return 0;
}
