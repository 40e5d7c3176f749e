/* Text datasets end to end through the nnlab binary: a synthetic review corpus written here (three
 * classes whose documents mix class words, some of them Greek and Cyrillic, into common ones;
 * an empty and a very long document; a file that is not UTF-8) imports in the IMDB layout and as
 * a CSV file, and embedbag and textcnn train on it to at least 0.9 test accuracy; predict takes
 * raw text. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nnlab/rng.h"
#include "nnlab_cli.h"
#include "reviews.h"
#include "tap.h"

#define NCLASS REVIEW_CLASSES
#define NTRAIN 240 /* per class */
#define NTEST  60

static uint32_t next(struct nl_rng *r, uint32_t n)
{
    return (uint32_t)(nl_rng_next(r) % n);
}

static void mkdirs(const char *path)
{
    char p[512];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            mkdir(p, 0755);
            *s = '/';
        }
    mkdir(p, 0755);
}

/* DIR/imdb/{train,test}/CLASS/N.txt and DIR/reviews.csv (review,sentiment) with the same
 * documents. */
static void write_corpus(void)
{
    struct nl_rng r;
    char path[512];
    nl_rng_seed(&r, 5);
    snprintf(path, sizeof path, "%s/reviews.csv", dir);
    FILE *csv = fopen(path, "w");
    fputs("id,review,sentiment\n", csv);
    int id = 0;
    for (int split = 0; split < 2; split++) {
        for (int k = 0; k < NCLASS; k++) {
            char cdir[400];
            snprintf(cdir, sizeof cdir, "%s/imdb/%s/%s", dir, split ? "test" : "train",
                     review_classes[k]);
            mkdirs(cdir);
            int n = split ? NTEST : NTRAIN;
            for (int i = 0; i < n; i++) {
                int nwords = 10 + (int)next(&r, 41);
                if (split == 0 && k == 0 && i == 0)
                    nwords = 0; /* an empty document */
                if (split == 0 && k == 1 && i == 0)
                    nwords = 20000; /* a very long one */
                snprintf(path, sizeof path, "%s/%d_%d.txt", cdir, i, k);
                FILE *f = fopen(path, "w");
                review_write(f, k, &r, nwords, 0);
                fclose(f);
                fprintf(csv, "%d,\"", id++);
                review_write(csv, k, &r, nwords < 1000 ? nwords : 100, 1);
                fprintf(csv, "\",%s\n", review_classes[k]);
            }
        }
    }
    fclose(csv);
    /* IMDB's unlabelled folder and a loose file beside the class folders. */
    snprintf(path, sizeof path, "%s/imdb/train/unsup", dir);
    mkdirs(path);
    snprintf(path, sizeof path, "%s/imdb/train/unsup/0_0.txt", dir);
    FILE *f = fopen(path, "w");
    fputs("no label\n", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/imdb/train/urls_pos.txt", dir);
    f = fopen(path, "w");
    fputs("http://example.com\n", f);
    fclose(f);
}

static void write_bad(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/imdb/train/pos/bad.txt", dir);
    FILE *f = fopen(path, "w");
    fputs("great film \xff\xfe broken", f);
    fclose(f);
}

static double test_accuracy(void)
{
    const char *p = strstr(out, "test accuracy ");
    return p ? atof(p + 14) : -1;
}

int main(void)
{
    nnlab_cli_setup("textdata", "store.db");
    write_corpus();
    write_bad();

    /* The bad file stops the import, naming it, and leaves nothing behind. */
    ok(nnlab("import reviews %s/imdb", dir) != 0, "a file that is not UTF-8 fails the import");
    like(errtext, "bad.txt: not valid UTF-8 (byte 12)", "naming the file and the byte");
    nnlab("datasets");
    ok(strstr(out, "reviews") == NULL, "and nothing is stored");

    ok(nnlab("import reviews %s/imdb --skip-bad --vocab 500 --max-len 64", dir) == 0,
       "with --skip-bad the IMDB layout imports");
    diag("%s", errtext);
    like(errtext, "skipped", "the bad file is listed as skipped");
    like(errtext, "unsup", "IMDB's unlabelled folder is left out, said once");
    like(out, "720 train, 0 val, 180 test samples of 1x1x64, 3 classes", "counts and shape");

    ok(nnlab("show reviews") == 0, "show");
    like(out, "vocabulary: ", "show gives the vocabulary's size");
    like(out, "covering ", "its coverage of the train split");
    like(out, "most frequent: ", "and the most frequent words");
    like(out, "это (", "Cyrillic words are words");
    like(out, "είναι (", "Greek words too");
    like(out, "film (", "lower-cased: Film and film are one word");
    ok(strstr(out, " Film (") == NULL && strstr(out, " cast (") != NULL, "CAST is cast");
    ok(nnlab("--json show reviews") == 0, "show --json");
    like(out, "\"vocab\":", "--json has the vocabulary size");
    like(out, "\"empty\":1", "the empty document is counted");
    like(out, "\"truncated\":", "and the cut ones");

    ok(nnlab("train --data reviews --model embedbag --epochs 8 --batch 32 --lr 0.1 --name eb") == 0,
       "embedbag trains on the IMDB layout");
    double acc = test_accuracy();
    ok(acc >= 0.9, "embedbag reaches %.4f test accuracy (>= 0.9)", acc);
    if (acc < 0.9)
        diag("%s%s", out, errtext);

    ok(nnlab("predict eb --text 'A wonderful, superb film: I LOVED it'") == 0,
       "predict takes raw text");
    like(out, "pos", "and names the class");
    ok(nnlab("--json predict eb --text 'terrible and boring, the worst'") == 0, "predict --json");
    like(out, "\"class\":\"neg\"", "--json gives the class");
    like(out, "\"probability\":", "with its probability");
    ok(nnlab("predict eb --text \"$(printf 'bad \\377 byte')\"") != 0,
       "text that is not UTF-8 is refused");
    like(errtext, "UTF-8", "saying why");

    /* Resume, freeze, export, summary. */
    ok(nnlab("train --resume eb --epochs 9") == 0, "a text run resumes");
    like(out, "epoch 9/9", "to the epochs asked for");
    ok(nnlab("train --data reviews --model embedbag --epochs 1 --freeze embed --init eb "
             "--name frozen") == 0,
       "a text model trains with its embedding frozen, from a run's weights");
    ok(nnlab("export eb %s/eb.safetensors", dir) == 0, "a text run exports to safetensors");
    ok(nnlab("export eb %s/eb.onnx", dir) != 0, "ONNX export is refused");
    like(errtext, "kind 'embedding' has no ONNX form", "naming the layer kind");
    ok(nnlab("summary textcnn --data reviews") == 0, "summary takes the vocabulary from --data");
    like(out, "conv1d", "and lists the sequence layers");

    /* A recurrent model from a spec file. */
    char spec[512];
    snprintf(spec, sizeof spec, "%s/gru.spec", dir);
    FILE *sf = fopen(spec, "w");
    fputs("embed: embedding 32\nrnn: gru 32 in=embed,input\nfc: dense N\n", sf);
    fclose(sf);
    ok(nnlab("train --data reviews --model %s --epochs 4 --batch 32 --optim adam --lr 0.01 "
             "--name gru",
             spec) == 0,
       "a gru model trains");
    acc = test_accuracy();
    ok(acc >= 0.9, "gru reaches %.4f test accuracy (>= 0.9)", acc);

    ok(nnlab("train --data reviews --model textcnn --epochs 4 --batch 32 --lr 0.05 --name tc") == 0,
       "textcnn trains");
    acc = test_accuracy();
    ok(acc >= 0.9, "textcnn reaches %.4f test accuracy (>= 0.9)", acc);

    ok(nnlab("import --text review --label sentiment --test 0.2 --vocab 300 --max-len 48 csv "
             "%s/reviews.csv",
             dir) == 0,
       "the same corpus imports from CSV with --text");
    diag("%s", errtext);
    like(out, "3 classes", "with its three classes");
    ok(nnlab("train --data csv --model embedbag --epochs 8 --batch 32 --lr 0.1") == 0,
       "embedbag trains on the CSV dataset");
    acc = test_accuracy();
    ok(acc >= 0.9, "and reaches %.4f test accuracy (>= 0.9)", acc);
    ok(nnlab("import --text nosuch csv2 %s/reviews.csv", dir) != 0, "an unknown text column");
    like(errtext, "no column named 'nosuch'", "is named");
    ok(nnlab("import --vocab 10 imgs %s/reviews.csv", dir) != 0,
       "--vocab without --text on a CSV file is refused");

    /* The tables' CSV reader reads text columns too: a byte-order mark before the header and
     * CRLF line ends are read through, a NUL byte is refused with FILE:LINE and the field. */
    char csvpath[512];
    snprintf(csvpath, sizeof csvpath, "%s/bom.csv", dir);
    FILE *bf = fopen(csvpath, "wb");
    fputs("\xef\xbb\xbfreview;sentiment\r\n\"a superb, wonderful film\";pos\r\n"
          "terrible and boring;neg\r\nsuperb cast;pos\r\nthe worst;neg\r\n",
          bf);
    fclose(bf);
    ok(nnlab("import --text review --label sentiment --test 0 bom %s", csvpath) == 0,
       "a CSV with a byte-order mark imports its text column by name");
    like(out, "4 train, 0 val, 0 test samples", "all four rows, CRLF ends read through");
    snprintf(csvpath, sizeof csvpath, "%s/nul.csv", dir);
    bf = fopen(csvpath, "wb");
    fwrite("review,sentiment\ngood film,pos\nbad\0film,neg\n", 1, 44, bf);
    fclose(bf);
    ok(nnlab("import --text review nul %s", csvpath) != 0, "a NUL byte in a text column");
    like(errtext, "nul.csv:3: field 1 has a NUL byte", "is refused naming the line and field");

    nnlab_cli_cleanup();
    return done_testing();
}
