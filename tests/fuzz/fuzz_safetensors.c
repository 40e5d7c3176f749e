/* libFuzzer target for the safetensors reader: the input is written to a file and loaded into a
 * small model (a convolution and a dense layer) as --init FILE loads it, whole and then partially.
 * Any input must give a clean error or a load, never a crash, a leak or memory out of proportion
 * to the input. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "nnlab/model.h"
#include "nnlab/safetensors.h"
#include "nnlab/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct nl_model *model(void)
{
    static struct nl_model *m;
    struct nl_spec *spec = NULL;
    struct nl_error err = {0};

    if (m)
        return m;
    if (nl_spec_parse(&spec, "conv1: conv 2 3x3\nbn1: batchnorm\nfc1: dense N\n", "fuzz", NULL,
                      NULL, &err) != 0 ||
        nl_model_build(&m, spec, (struct nl_shape){1, 5, 5}, 3, &err) != 0) {
        fprintf(stderr, "fuzz: %s\n", err.msg);
        abort();
    }
    nl_spec_free(spec);
    return m;
}

static void ignore(void *ud, const char *msg)
{
    (void)ud;
    (void)msg;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write_file("safetensors", data, size);
    struct nl_safetensors_report report;
    struct nl_error err = {0};

    if (!path)
        return 0;
    nl_safetensors_load(model(), path, 0, NULL, NULL, &report, &err);
    nl_safetensors_load(model(), path, 1, ignore, NULL, &report, &err);
    return 0;
}
