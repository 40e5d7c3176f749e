/* The command line end to end, through the real binary: global options anywhere, help and usage
 * errors, import of IDX files (good and bad), training with --json, runs, eval, predict, show
 * and rm. With the Fashion-MNIST package installed, a 2,000-image subset of it trains through
 * the same path. */
#include <png.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "idx_writer.h"
#include "nnlab_cli.h"
#include "png_writer.h"
#include "tap.h"

#define FASHION "/usr/share/datasets/fashion-mnist"

/* Whether every line of out parses as a JSON object (Python's parser, which meson brings). */
static int json_lines(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys\n"
             "for l in sys.stdin:\n"
             "    assert isinstance(json.loads(l), dict)' <'%s' 2>/dev/null",
             out_path);
    return system(cmd) == 0 && out[0] == '{';
}

static int count_lines_with(const char *needle)
{
    int n = 0;
    for (const char *p = out; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

static double json_number(const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(out, pat);
    return p ? strtod(p + strlen(pat), NULL) : -1.0;
}

/* Synthetic 8x8 data: class k lights row band k of the image. */
static void synthetic(uint8_t *px, uint8_t *lab, uint32_t n, unsigned seed)
{
    for (uint32_t i = 0; i < n; i++) {
        int k = (int)((i * 7 + seed) % 4);
        lab[i] = (uint8_t)k;
        for (int p = 0; p < 64; p++) {
            int row = p / 8;
            px[i * 64 + p] = (uint8_t)((row / 2 == k ? 200 : 20) + (p * 13 + i) % 40);
        }
    }
}

/* Copies the first n images and labels of the Fashion-MNIST pair PREFIX (".../train") into new
 * IDX files, the first image also into first_image. */
static int subset(const char *prefix, const char *dst_images, const char *dst_labels, uint32_t n,
                  uint8_t *first_image)
{
    uint8_t *px, *lab;
    if (idx_read_first(prefix, n, &px, &lab) != 0)
        return -1;
    idx_write(dst_images, dst_labels, px, lab, n, 28, 28);
    memcpy(first_image, px, 784);
    free(px);
    free(lab);
    return 0;
}

static void test_basics(void)
{
    is_int(nnlab("--version"), 0, "--version");
    like(out, "nnlab 0.", "prints the version");
    is_int(nnlab("--version --json"), 0, "--version --json");
    ok(json_lines(), "as JSON");
    is_int(nnlab("--help"), 0, "--help");
    like(out, "train", "lists the commands");
    is_int(nnlab("train --help"), 0, "train --help");
    like(out, "--epochs", "lists train's options");
    is_int(nnlab("frobnicate"), 2, "an unknown command is a usage error");
    like(errtext, "frobnicate", "naming it");
    is_int(nnlab("train --data x --model lenet --batch 0"), 2, "batch 0 is a usage error");
    like(errtext, "--batch", "naming the option");
    is_int(nnlab("datasets"), 0, "datasets on an empty store");
    like(out, "no datasets", "says there are none");
    is_int(nnlab("datasets --json"), 0, "datasets --json");
    like(out, "{\"datasets\":[]}", "an empty list");
}

static void test_synthetic(void)
{
    char images[256], labels[256], bad[256], spec[256], cmd[600];
    uint8_t px[600 * 64], lab[600];

    synthetic(px, lab, 600, 1);
    snprintf(images, sizeof images, "%s/syn/train-images-idx3-ubyte.gz", dir);
    snprintf(labels, sizeof labels, "%s/syn/train-labels-idx1-ubyte.gz", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/syn'", dir);
    ok(system(cmd) == 0, "made a folder");
    idx_write(images, labels, px, lab, 500, 8, 8);
    snprintf(images, sizeof images, "%s/syn/t10k-images-idx3-ubyte.gz", dir);
    snprintf(labels, sizeof labels, "%s/syn/t10k-labels-idx1-ubyte.gz", dir);
    idx_write(images, labels, px + 500 * 64, lab + 500, 100, 8, 8);

    is_int(nnlab("import syn '%s/syn' --val 0.2", dir), 0, "import an IDX folder");
    like(out, "400 train, 100 val, 100 test", "with a validation split carved from train");
    is_int(nnlab("import syn '%s/syn'", dir), 1, "a second import of the name fails");
    like(errtext, "already exists", "saying it exists");

    /* A truncated images file: a clear error naming the file; nothing left behind. */
    snprintf(bad, sizeof bad, "%s/bad-images.gz", dir);
    gzFile f = gzopen(bad, "wb");
    idx_images_header(f, 100, 8, 8);
    gzwrite(f, px, 1000);
    gzclose(f);
    snprintf(labels, sizeof labels, "%s/syn/train-labels-idx1-ubyte.gz", dir);
    is_int(nnlab("import broken '%s' '%s'", bad, labels), 1, "a truncated file fails");
    like(errtext, "nnlab: import: ", "with the nnlab: import: prefix");
    like(errtext, bad, "naming the file");
    nnlab("datasets --json");
    ok(strstr(out, "broken") == NULL, "and leaves no dataset behind");

    /* A spec with a mistake: FILE:LINE in the message. */
    snprintf(spec, sizeof spec, "%s/bad.spec", dir);
    f = gzopen(spec, "wT");
    gzputs(f, "fc1: dense 16\nrelu\nfc2: dense lots\n");
    gzclose(f);
    is_int(nnlab("train --data syn --model '%s'", spec), 1, "a bad spec fails");
    snprintf(cmd, sizeof cmd, "%s:3:", spec);
    like(errtext, cmd, "naming the file and line");
    is_int(nnlab("train --data nope --model mlp"), 1, "an unknown dataset fails");
    like(errtext, "no dataset named 'nope'", "naming it");

    /* Training with --json (given after the command), then the run's records. */
    is_int(nnlab("train --data syn --model mlp --epochs 3 --batch 16 --threads 2 --name syn1 "
                 "--json"),
           0, "train --json");
    ok(json_lines(), "stdout holds only JSON objects");
    is_int(count_lines_with("\"event\":\"epoch\""), 3, "one epoch object per epoch");
    like(out, "\"val_accuracy\":", "epoch objects carry the validation accuracy");
    like(out, "\"event\":\"done\",\"run\":\"syn1\"", "a done object names the run");
    double acc = json_number("test_accuracy");
    ok(acc >= 0.9, "synthetic test accuracy %.4f >= 0.9", acc);

    is_int(nnlab("--json eval syn1"), 0, "eval --json");
    ok(json_lines(), "as JSON");
    is_float(json_number("test_accuracy"), acc, 1e-4, "eval agrees with training's test");
    is_int(nnlab("eval syn1 --split val"), 0, "eval on the validation split");
    like(out, "val accuracy", "reports it");
    is_int(nnlab("runs"), 0, "runs");
    like(out, "syn1", "lists the run");
    like(out, "done", "as done");
    is_int(nnlab("runs --json"), 0, "runs --json");
    ok(json_lines(), "as JSON");

    /* Weights out and back in. */
    char st[256];
    snprintf(st, sizeof st, "%s/syn1.safetensors", dir);
    is_int(nnlab("export syn1 '%s'", st), 0, "export");
    ok(access(st, R_OK) == 0, "wrote the file");
    is_int(nnlab("eval '%s' --model mlp --data syn --json", st), 0, "eval a weights file");
    is_float(json_number("test_accuracy"), acc, 1e-4, "same accuracy as the run");
    is_int(nnlab("eval '%s' --data syn", st), 2, "a weights file needs --model");
    char narrow[256];
    snprintf(narrow, sizeof narrow, "%s/narrow.spec", dir);
    FILE *nf = fopen(narrow, "w");
    fputs("fc1: dense 100\nrelu\nfc2: dense 256\nrelu\nfc3: dense N\n", nf);
    fclose(nf);
    is_int(nnlab("eval '%s' --model '%s' --data syn", st, narrow), 1, "the wrong model fails");
    like(errtext, "fc1.weight: file has [512,64], model wants [100,64]", "listing the tensors");
    is_int(nnlab("train --data syn --model mlp --epochs 1 --init syn1 --name syn3"), 0,
           "train --init RUN");
    like(out, "initialised 6 tensors from syn1", "reports what it loaded");
    is_int(nnlab("train --data syn --model mlp --epochs 1 --init '%s' --name syn4", st), 0,
           "train --init FILE");
    /* Fine-tuning: the head re-created, fc1 frozen; the run's weights (stored in the frozen
     * layout) evaluate and export as they trained. */
    is_int(nnlab("train --data syn --model mlp --epochs 1 --init syn1 --replace-head --freeze fc1 "
                 "--clip-norm 5 --name syn5 --json"),
           0, "train --replace-head --freeze --clip-norm");
    double ft_acc = json_number("test_accuracy");
    is_int(nnlab("--json eval syn5"), 0, "eval the fine-tuned run");
    is_float(json_number("test_accuracy"), ft_acc, 1e-4, "agrees with its training's test");
    snprintf(st, sizeof st, "%s/syn5.safetensors", dir);
    is_int(nnlab("export syn5 '%s'", st), 0, "export the fine-tuned run");
    is_int(nnlab("eval '%s' --model mlp --data syn --json", st), 0, "and evaluate the file");
    is_float(json_number("test_accuracy"), ft_acc, 1e-4, "with the same accuracy");
    is_int(nnlab("train --data syn --model mlp --epochs 1 --freeze nope"), 1,
           "freezing an unknown layer fails");
    like(errtext, "no layer 'nope'", "naming it");
    is_int(nnlab("train --data syn --model mlp --replace-head"), 2, "--replace-head needs --init");
    is_int(nnlab("summary mlp --data syn --freeze-up-to fc3"), 0, "summary --freeze-up-to");
    like(out, "0 trainable", "shows nothing trainable");
    is_int(nnlab("summary mlp --data syn"), 0, "summary");
    like(out, "fc1", "lists the layers");
    like(out, "165636 parameters", "with the total (64*512+512 + 512*256+256 + 256*4+4)");
    is_int(nnlab("summary mlp --input 3x32x32 --classes 100 --json"), 0, "summary --json");
    ok(json_lines(), "as JSON");

    is_int(nnlab("show syn"), 0, "show");
    like(out, "400 train, 100 val, 100 test", "counts per split");
    is_int(nnlab("show syn --json"), 0, "show --json");
    ok(json_lines(), "as JSON");
    is_int(nnlab("show nope"), 1, "show of an unknown dataset fails");

    is_int(nnlab("--quiet train --data syn --model mlp --epochs 1 --name syn2"), 0, "--quiet");
    ok(strstr(out, "epoch") == NULL, "prints no progress");
    like(out, "test accuracy", "but the result");

    is_int(nnlab("rm syn"), 0, "rm");
    nnlab("datasets --json");
    ok(strstr(out, "\"syn\"") == NULL, "the dataset is gone");
    is_int(nnlab("rm syn"), 1, "rm of a missing dataset fails");
}

/* CSV and PNG folders through the command line: a CSV of four Gaussian blobs (string labels,
 * semicolons) trains an mlp to a high accuracy; bad rows give nnlab: import: PATH:LINE: why; a
 * PNG class tree imports, trains with augmentation, and predicts on a PNG of another size. */
static void test_csv_png(void)
{
    static const char *const names[4] = {"north", "east", "south", "west"};
    char path[640], bad[256], msg[1024], tree[128];
    uint32_t state = 12345;
    FILE *f;

    snprintf(path, sizeof path, "%s/blobs.csv", dir);
    f = fopen(path, "w");
    fprintf(f, "f1;f2;f3;f4;f5;f6;direction\n");
    for (int i = 0; i < 800; i++) {
        int k = i % 4;
        for (int j = 0; j < 6; j++) {
            double u = 0;
            for (int r = 0; r < 4; r++) {
                state = state * 1664525u + 1013904223u;
                u += (double)(state >> 8) / (double)(1u << 24) - 0.5;
            }
            /* Centres 2 apart on one axis each, noise of std about 0.6, offset and scale that
             * standardisation removes. */
            double centre = (j == k ? 2.0 : 0.0) + (j == 4 ? 100.0 : 0.0);
            fprintf(f, "%.4f;", (centre + u) * (j == 5 ? 1000.0 : 1.0));
        }
        fprintf(f, "%s\n", names[k]);
    }
    fclose(f);
    is_int(nnlab("import blobs '%s' --val 0.1 --test 0.2", path), 0, "import a CSV");
    like(out, "560 train, 80 val, 160 test", "with stratified validation and test splits");
    is_int(nnlab("show blobs"), 0, "show a CSV dataset");
    like(out, "csv dataset", "its kind");
    like(out, "\"separator\":\";\"", "and its preprocessing record");
    like(out, "south", "and the class names from the labels");
    is_int(nnlab("train --data blobs --model mlp --epochs 8 --batch 32 --lr 0.02 --threads 2 "
                 "--name blobs1 --json"),
           0, "train an mlp on the CSV dataset");
    double acc = json_number("test_accuracy");
    ok(acc >= 0.9, "CSV test accuracy %.4f >= 0.9", acc);

    snprintf(bad, sizeof bad, "%s/bad.csv", dir);
    f = fopen(bad, "w");
    fprintf(f, "a,b,label\n1,2,x\n3,oops,y\n");
    fclose(f);
    is_int(nnlab("import badcsv '%s'", bad), 1, "a bad CSV row fails");
    snprintf(msg, sizeof msg, "nnlab: import: %s:3: field 2 ('oops') is not a number", bad);
    like(errtext, msg, "with nnlab: import: PATH:LINE: why");
    is_int(nnlab("import badcsv '%s' --skip-bad", bad), 0, "--skip-bad imports the rest");
    like(out, "skipped 1 bad file or row", "and reports how many");
    like(errtext, ":3:", "and which");

    /* A PNG class tree. */
    uint8_t px[600 * 64], lab[600];
    synthetic(px, lab, 600, 3);
    snprintf(tree, sizeof tree, "%s/tree", dir);
    for (int k = 0; k < 4; k++) {
        snprintf(path, sizeof path, "mkdir -p '%s/%s'", tree, names[k]);
        if (system(path) != 0)
            diag("cannot make a folder");
    }
    for (int i = 0; i < 600; i++) {
        snprintf(path, sizeof path, "%s/%s/%03d.png", tree, names[lab[i]], i);
        write_png_8bit(path, px + i * 64, 8, 8, 1);
    }
    is_int(nnlab("--json import pngs '%s' --val 0.2", tree), 0, "import a PNG class tree --json");
    ok(json_lines(), "stdout holds only JSON");
    like(out, "\"kind\":\"png\",\"shape\":[1,8,8],\"classes\":4", "gray 8x8, four classes");
    is_int(nnlab("datasets"), 0, "datasets");
    like(out, "SIZE", "with sizes");
    is_int(nnlab("train --data pngs --model mlp --epochs 3 --threads 2 --augment flip,crop:1 "
                 "--name pngs1 --json"),
           0, "train with --augment flip,crop:1");
    like(out, "\"test_accuracy\":null", "no test split, so no test accuracy");
    is_int(nnlab("train --data pngs --model mlp --augment spin"), 2, "a bad --augment");
    like(errtext, "spin", "naming it");
    uint8_t big[16 * 16];
    for (int p = 0; p < 256; p++)
        big[p] = px[(p / 32) * 8 + (p % 16) / 2];
    snprintf(path, sizeof path, "%s/big.png", dir);
    write_png_8bit(path, big, 16, 16, 1);
    is_int(nnlab("predict pngs1 '%s'", path), 0, "predict a PNG of another size");
    like(out, names[lab[0]], "naming a class");

    snprintf(path, sizeof path, "%s/tree/east/zz.png", dir);
    f = fopen(path, "w");
    fprintf(f, "not a png");
    fclose(f);
    is_int(nnlab("import pngs2 '%s'", tree), 1, "a non-PNG file in the tree fails");
    snprintf(msg, sizeof msg, "nnlab: import: %s: not a PNG or JPEG image", path);
    like(errtext, msg, "naming it");
    nnlab("datasets --json");
    ok(strstr(out, "pngs2") == NULL, "and leaves nothing behind");
}

static void test_fashion_subset(void)
{
    char cmd[600], a[256], b[256], png[256];
    uint8_t first[784];
    struct stat st;

    if (stat(FASHION "/train-images-idx3-ubyte.gz", &st) != 0) {
        ok(1, "# SKIP Fashion-MNIST is not installed (dataset-fashion-mnist)");
        return;
    }
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/fsub'", dir);
    ok(system(cmd) == 0, "made a folder");
    snprintf(a, sizeof a, "%s/fsub/train-images-idx3-ubyte.gz", dir);
    snprintf(b, sizeof b, "%s/fsub/train-labels-idx1-ubyte.gz", dir);
    is_int(subset(FASHION "/train", a, b, 2000, first), 0, "2,000 training images copied");
    snprintf(a, sizeof a, "%s/fsub/t10k-images-idx3-ubyte.gz", dir);
    snprintf(b, sizeof b, "%s/fsub/t10k-labels-idx1-ubyte.gz", dir);
    is_int(subset(FASHION "/t10k", a, b, 500, first), 0, "500 test images copied");

    /* The folder name says fashion, so the classes get their names. */
    is_int(nnlab("import fashion-sub '%s/fsub'", dir), 0, "import the subset");
    is_int(nnlab("train --data fashion-sub --model lenet --epochs 2 --threads 2 --name fs --json"),
           0, "lenet trains on it");
    ok(json_lines(), "JSON lines");
    double acc = json_number("test_accuracy");
    ok(acc >= 0.6, "2,000-image lenet test accuracy %.4f >= 0.6", acc);

    snprintf(png, sizeof png, "%s/first-test.png", dir);
    is_int(write_png_8bit(png, first, 28, 28, 1), 0, "wrote a test image as PNG");
    is_int(nnlab("predict fs '%s'", png), 0, "predict");
    like(out, png, "names the file");
    int commas = 0;
    for (const char *p = out; *p; p++)
        commas += *p == ',';
    is_int(commas, 2, "with three classes");
    is_int(nnlab("predict fs '%s' --json --top 5", png), 0, "predict --json --top 5");
    ok(json_lines(), "as JSON");
    is_int(count_lines_with("\"probability\":"), 5, "five classes");
    is_int(nnlab("predict fs '%s' '%s/nothing.png' --json", png, dir), 1, "a missing image fails");
    is_int((int)strlen(out), 0, "and --json prints nothing half-done");
    like(errtext, "nothing.png", "naming the file");
}

int main(void)
{
    nnlab_cli_setup("cli", "store/nnlab.db");

    test_basics();
    test_synthetic();
    test_csv_png();
    test_fashion_subset();

    nnlab_cli_cleanup();
    return done_testing();
}
