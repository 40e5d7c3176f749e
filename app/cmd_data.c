/* The dataset commands: import, datasets, show, rm. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "nnlab/alloc.h"
#include "nnlab/dataset.h"

int cmd_import(int argc, char **argv)
{
    static const struct option opts[] = {
        {"val", required_argument, NULL, 'v'},
        {"seed", required_argument, NULL, 's'},
        {NULL, 0, NULL, 0},
    };
    struct nl_import_opts io = {.seed = 1, .warn = warn_cb};
    struct nl_error err = {0};
    struct nl_store *store;
    double f;
    long seed;
    int c, rc;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'v':
            if (!parse_float(optarg, 0.0, 0.9, &f))
                return usage_error("import", "--val %s: want a fraction in [0, 0.9]", optarg);
            io.val_fraction = (float)f;
            break;
        case 's':
            if (!parse_int(optarg, 0, 0x7fffffffL, &seed))
                return usage_error("import", "--seed %s: want a non-negative integer", optarg);
            io.seed = (uint64_t)seed;
            break;
        default:
            return usage_error("import", "unknown option");
        }
    }
    if (argc - optind < 2)
        return usage_error("import", "needs a NAME and a SOURCE");
    const char *name = argv[optind];
    if (open_store(&store, &err) < 0)
        return fail(&err);
    rc = nl_import_idx(store, name, (const char *const *)argv + optind + 1, argc - optind - 1, &io,
                       &err);
    if (rc < 0) {
        nl_store_close(store);
        nl_error_prefix(&err, "import");
        return fail(&err);
    }
    struct nl_dataset_info *list;
    int n;
    rc = nl_dataset_list(store, &list, &n, &err);
    nl_store_close(store);
    if (rc < 0)
        return fail(&err);
    for (int i = 0; i < n; i++) {
        const struct nl_dataset_info *d = &list[i];
        if (strcmp(d->name, name) != 0)
            continue;
        if (g.json) {
            printf("{\"event\":\"imported\",\"dataset\":");
            json_str(stdout, d->name);
            printf(",\"classes\":%d,\"train\":%u,\"val\":%u,\"test\":%u}\n", d->nclasses,
                   d->count[NL_TRAIN], d->count[NL_VAL], d->count[NL_TEST]);
        } else if (!g.quiet) {
            printf("imported '%s': %u train, %u val, %u test samples of %dx%dx%d, %d classes\n",
                   d->name, d->count[NL_TRAIN], d->count[NL_VAL], d->count[NL_TEST], d->shape.c,
                   d->shape.h, d->shape.w, d->nclasses);
        }
    }
    nl_free(list);
    return EXIT_OK;
}

int cmd_datasets(int argc, char **argv)
{
    struct nl_error err = {0};
    struct nl_store *store;
    struct nl_dataset_info *list;
    int n;

    if (argc > 1)
        return usage_error("datasets", "takes no arguments");
    if (open_store(&store, &err) < 0)
        return fail(&err);
    int rc = nl_dataset_list(store, &list, &n, &err);
    nl_store_close(store);
    if (rc < 0)
        return fail(&err);
    if (g.json) {
        printf("{\"datasets\":[");
        for (int i = 0; i < n; i++) {
            const struct nl_dataset_info *d = &list[i];
            printf("%s{\"name\":", i ? "," : "");
            json_str(stdout, d->name);
            printf(",\"kind\":");
            json_str(stdout, d->kind);
            printf(",\"shape\":[%d,%d,%d],\"classes\":%d,\"train\":%u,\"val\":%u,\"test\":%u,"
                   "\"source\":",
                   d->shape.c, d->shape.h, d->shape.w, d->nclasses, d->count[NL_TRAIN],
                   d->count[NL_VAL], d->count[NL_TEST]);
            json_str(stdout, d->source);
            printf(",\"created\":");
            json_str(stdout, d->created);
            printf("}");
        }
        printf("]}\n");
    } else if (n == 0) {
        printf("no datasets yet: nnlab import NAME SOURCE, or nnlab demo\n");
    } else {
        printf("%-20s %-5s %-10s %7s %7s %6s %6s  %s\n", "NAME", "KIND", "SHAPE", "CLASSES",
               "TRAIN", "VAL", "TEST", "SOURCE");
        for (int i = 0; i < n; i++) {
            const struct nl_dataset_info *d = &list[i];
            char shape[48];
            snprintf(shape, sizeof shape, "%dx%dx%d", d->shape.c, d->shape.h, d->shape.w);
            printf("%-20s %-5s %-10s %7d %7u %6u %6u  %s\n", d->name, d->kind, shape, d->nclasses,
                   d->count[NL_TRAIN], d->count[NL_VAL], d->count[NL_TEST], d->source);
        }
    }
    nl_free(list);
    return EXIT_OK;
}

int cmd_show(int argc, char **argv)
{
    struct nl_error err = {0};
    struct nl_store *store;
    struct nl_dataset *d;

    if (argc != 2)
        return usage_error("show", "needs one dataset NAME");
    if (open_store(&store, &err) < 0)
        return fail(&err);
    int rc = nl_dataset_load(store, argv[1], &d, &err);
    nl_store_close(store);
    if (rc < 0)
        return fail(&err);

    uint32_t *counts = nl_calloc((size_t)d->nclasses * NL_NSPLITS, sizeof *counts);
    if (!counts) {
        nl_dataset_free(d);
        return failf("out of memory");
    }
    for (int s = 0; s < NL_NSPLITS; s++)
        for (uint32_t i = 0; i < d->split[s].n; i++)
            counts[d->split[s].y[i] * NL_NSPLITS + s]++;

    if (g.json) {
        printf("{\"name\":");
        json_str(stdout, d->name);
        printf(",\"kind\":");
        json_str(stdout, d->kind);
        printf(",\"source\":");
        json_str(stdout, d->source);
        printf(",\"shape\":[%d,%d,%d],\"dtype\":\"%s\",\"train\":%u,\"val\":%u,\"test\":%u",
               d->shape.c, d->shape.h, d->shape.w, d->dtype == NL_U8 ? "u8" : "f32",
               d->split[NL_TRAIN].n, d->split[NL_VAL].n, d->split[NL_TEST].n);
        printf(",\"mean\":[");
        for (int i = 0; i < d->nnorm; i++) {
            printf(i ? "," : "");
            json_num(stdout, d->mean[i]);
        }
        printf("],\"std\":[");
        for (int i = 0; i < d->nnorm; i++) {
            printf(i ? "," : "");
            json_num(stdout, d->std[i]);
        }
        printf("],\"classes\":[");
        for (int k = 0; k < d->nclasses; k++) {
            printf("%s{\"label\":%d,\"name\":", k ? "," : "", k);
            json_str(stdout, d->class_names[k]);
            printf(",\"train\":%u,\"val\":%u,\"test\":%u}", counts[k * NL_NSPLITS + NL_TRAIN],
                   counts[k * NL_NSPLITS + NL_VAL], counts[k * NL_NSPLITS + NL_TEST]);
        }
        printf("]}\n");
    } else {
        printf("%s: %s dataset from %s\n", d->name, d->kind, d->source);
        printf("shape %dx%dx%d (%s), %d classes\n", d->shape.c, d->shape.h, d->shape.w,
               d->dtype == NL_U8 ? "8-bit" : "float", d->nclasses);
        printf("samples: %u train, %u val, %u test\n", d->split[NL_TRAIN].n, d->split[NL_VAL].n,
               d->split[NL_TEST].n);
        for (int i = 0; i < d->nnorm; i++)
            printf("channel %d: mean %.4f, std %.4f\n", i, d->mean[i], d->std[i]);
        printf("\n%5s  %-20s %7s %7s %7s\n", "LABEL", "CLASS", "TRAIN", "VAL", "TEST");
        for (int k = 0; k < d->nclasses; k++)
            printf("%5d  %-20s %7u %7u %7u\n", k, d->class_names[k],
                   counts[k * NL_NSPLITS + NL_TRAIN], counts[k * NL_NSPLITS + NL_VAL],
                   counts[k * NL_NSPLITS + NL_TEST]);
    }
    nl_free(counts);
    nl_dataset_free(d);
    return EXIT_OK;
}

int cmd_rm(int argc, char **argv)
{
    struct nl_error err = {0};
    struct nl_store *store;

    if (argc != 2)
        return usage_error("rm", "needs one dataset NAME");
    if (open_store(&store, &err) < 0)
        return fail(&err);
    int rc = nl_dataset_remove(store, argv[1], &err);
    nl_store_close(store);
    if (rc < 0)
        return fail(&err);
    if (g.json) {
        printf("{\"removed\":");
        json_str(stdout, argv[1]);
        printf("}\n");
    } else if (!g.quiet) {
        printf("removed dataset '%s'\n", argv[1]);
    }
    return EXIT_OK;
}
