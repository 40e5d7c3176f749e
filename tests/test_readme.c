/* README.md as a newcomer meets it: its example blocks run in order, and what it shows beside
 * them is what they print; and every command's --help options and README's agree.
 *
 * The convention (also in a comment at the top of README.md):
 * - A ```sh block is run, whole, by `sh -e` in a fresh folder (HOME and XDG_DATA_HOME point
 *   into it, so the default --db is a new store; `tests` and `data` link to the source tree;
 *   `nnlab` is the built binary, first on PATH). Blocks run in README's order and share the
 *   folder and the store, so a block may use what an earlier one made. The block passes when
 *   the script exits 0.
 * - The line `<!-- not run: WHY -->` just before a ```sh fence keeps it from running (setup
 *   commands, cluster runs that need hosts, meson commands on a build folder). Its `nnlab`
 *   commands are still checked: every option they use is in that command's --help.
 * - A ```text block right after a run ```sh block (nothing but blank lines between) shows
 *   output: each of its non-blank lines must match a line of the block's stdout and stderr
 *   together. In a shown line `...` matches anything, a run of blanks any run of blanks, and a
 *   number with a decimal point any number, except a number after a word holding "acc"
 *   (accuracy, val_acc, "test_accuracy":), which must be within ACC_TOL of the shown one
 *   (ACC_TOL_SHORT while trainings are shortened); anything else matches itself.
 * - Other blocks (``` alone, model specs, tables of figures) are neither run nor checked.
 *
 * Trainings are shortened with NNLAB_EPOCHS_MAX=1 and NNLAB_TRAIN_SAMPLES=3000 (README
 * mentions both), which keeps the test to a minute or two on two cores; NNLAB_README_FULL=1
 * runs the examples as written, at full length, with the tight tolerance. The examples need
 * the Fashion-MNIST package; without it the test skips. */
#include <ctype.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"

#define FASHION       "/usr/share/datasets/fashion-mnist"
#define ACC_TOL       0.02 /* examples run as written */
#define ACC_TOL_SHORT 0.25 /* 1 epoch on 3,000 images against the shown full run */

enum { MAX_BLOCKS = 256, MAX_OUT = 1 << 20 };

struct block {
    int line;      /* of the opening fence, 1-based */
    char lang[16]; /* "sh", "text", "" ... */
    int not_run;   /* marked <!-- not run: ... --> */
    char *text;    /* the lines between the fences */
};

static struct block blocks[MAX_BLOCKS];
static int nblocks;
static const char *bin, *src;
static char dir[64], work[128];
static double acc_tol = ACC_TOL;

static char *slurp_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(MAX_OUT + 1);
    size_t n = buf ? fread(buf, 1, MAX_OUT, f) : 0;
    fclose(f);
    if (buf)
        buf[n] = '\0';
    return buf;
}

/* Cuts README into its fenced blocks. */
static void parse_blocks(char *readme)
{
    char *line = readme, *prev = "";
    int lineno = 1;
    struct block *open = NULL;
    size_t cap = 0, len = 0;

    while (*line) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if (strncmp(line, "```", 3) == 0) {
            if (!open && nblocks < MAX_BLOCKS) {
                open = &blocks[nblocks++];
                open->line = lineno;
                snprintf(open->lang, sizeof open->lang, "%s", line + 3);
                open->not_run = strncmp(prev, "<!-- not run:", 13) == 0;
                cap = 1024;
                len = 0;
                open->text = calloc(1, cap);
            } else if (open) {
                open = NULL;
            }
        } else if (open) {
            size_t l = strlen(line);
            if (len + l + 2 > cap) {
                cap = 2 * (len + l + 2);
                open->text = realloc(open->text, cap);
            }
            memcpy(open->text + len, line, l);
            len += l;
            open->text[len++] = '\n';
            open->text[len] = '\0';
        }
        prev = line;
        lineno++;
        if (!nl)
            break;
        line = nl + 1;
    }
}

/* Appends s to the regex being built, escaped. */
static void re_lit(char *re, size_t cap, char c)
{
    size_t n = strlen(re);
    if (n + 3 >= cap)
        return;
    if (strchr(".[]()*+?{}|^$\\", c))
        re[n++] = '\\';
    re[n++] = c;
    re[n] = '\0';
}

static void re_add(char *re, size_t cap, const char *s)
{
    size_t n = strlen(re);
    snprintf(re + n, cap - n, "%s", s);
}

/* Whether the shown line matches one line of output, as the convention says. */
static int shown_line_matches(const char *shown, const char *output, char *why, size_t whycap)
{
    char re[4096] = "^[ \t]*";
    double want[32];
    int is_acc[32], nnum = 0;

    for (const char *p = shown; *p;) {
        if (strncmp(p, "...", 3) == 0) {
            re_add(re, sizeof re, ".*");
            p += 3;
        } else if (*p == ' ' || *p == '\t') {
            re_add(re, sizeof re, "[ \t]+");
            while (*p == ' ' || *p == '\t')
                p++;
        } else if ((isdigit((unsigned char)*p) || (*p == '-' && isdigit((unsigned char)p[1]))) &&
                   (p == shown || !isalnum((unsigned char)p[-1]))) {
            const char *q = p + (*p == '-');
            while (isdigit((unsigned char)*q))
                q++;
            if (*q == '.' && isdigit((unsigned char)q[1]) && nnum < 32) {
                q++;
                while (isdigit((unsigned char)*q))
                    q++;
                want[nnum] = strtod(p, NULL);
                /* An accuracy: "acc" in the word before the number. */
                int back = (int)(p - shown) < 24 ? (int)(p - shown) : 24;
                char before[32];
                memcpy(before, p - back, (size_t)back);
                before[back] = '\0';
                char *sp = before + back;
                while (sp > before && strchr(" \t\":=", sp[-1]))
                    sp--;
                while (sp > before && !strchr(" \t{,(", sp[-1]))
                    sp--;
                is_acc[nnum++] = strstr(sp, "acc") != NULL;
                re_add(re, sizeof re, "(-?[0-9]+\\.?[0-9]*(e[-+]?[0-9]+)?)");
            } else {
                for (const char *c = p; c < q; c++)
                    re_lit(re, sizeof re, *c);
            }
            p = q;
        } else {
            re_lit(re, sizeof re, *p++);
        }
    }
    regex_t rx;
    if (regcomp(&rx, re, REG_EXTENDED | REG_NEWLINE) != 0) {
        snprintf(why, whycap, "cannot compile /%s/", re);
        return 0;
    }
    regmatch_t m[65];
    const char *at = output;
    int found = 0, near = 0;
    while (!found && regexec(&rx, at, 65, m, at == output ? 0 : REG_NOTBOL) == 0) {
        int good = 1;
        /* The numbers are groups 1, 3, 5, ... (each has its exponent group after it). */
        for (int k = 0; k < nnum && good; k++) {
            regmatch_t g = m[1 + 2 * k];
            double got = strtod(at + g.rm_so, NULL);
            if (is_acc[k] && !(got >= want[k] - acc_tol && got <= want[k] + acc_tol)) {
                good = 0;
                snprintf(why, whycap, "accuracy %g where README shows %g (tolerance %g)", got,
                         want[k], acc_tol);
            }
        }
        near = 1;
        found = good;
        at += m[0].rm_eo > 0 ? m[0].rm_eo : 1;
        if (!*at)
            break;
    }
    regfree(&rx);
    if (!found && !near)
        snprintf(why, whycap, "no output line matches");
    return found;
}

/* Runs a sh block in the work folder; its stdout and stderr together in *out. */
static int run_block(const struct block *b, int index, char **out)
{
    char script[256], outp[256], cmd[1024];
    snprintf(script, sizeof script, "%s/block-%03d.sh", dir, index);
    snprintf(outp, sizeof outp, "%s/block-%03d.out", dir, index);
    FILE *f = fopen(script, "w");
    if (!f)
        return -1;
    fputs(b->text, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cd '%s' && sh -e '%s' >'%s' 2>&1 </dev/null", work, script, outp);
    int status = system(cmd);
    *out = slurp_file(outp);
    if (!*out)
        *out = calloc(1, 1);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_examples(void)
{
    for (int i = 0; i < nblocks; i++) {
        struct block *b = &blocks[i];
        if (strcmp(b->lang, "sh") != 0 || b->not_run)
            continue;
        char *out = NULL;
        int rc = run_block(b, i, &out);
        if (!is_int(rc, 0, "README.md:%d: the block runs", b->line)) {
            size_t n = strlen(out);
            const char *tail = n > 3000 ? out + n - 3000 : out;
            diag("the block:\n%s", b->text);
            diag("its output (the end):\n%s", tail);
        }
        /* Output shown beside it. */
        int block_end = b->line + 1; /* the closing fence */
        for (const char *c = b->text; *c; c++)
            block_end += *c == '\n';
        if (i + 1 < nblocks && strcmp(blocks[i + 1].lang, "text") == 0) {
            int shown_at = blocks[i + 1].line;
            if (shown_at - block_end <= 2) {
                char *copy = strdup(blocks[i + 1].text), *save = NULL;
                for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
                    if (!*l)
                        continue;
                    char why[256] = "";
                    if (!ok(shown_line_matches(l, out, why, sizeof why), "README.md:%d: shows '%s'",
                            shown_at, l)) {
                        diag("%s; the output:\n%s", why, out);
                    }
                }
                free(copy);
            }
        }
        free(out);
    }
}

/* The options (--name) in text, each once, in buf as " --a --b ". */
static void options_in(const char *text, char *buf, size_t cap)
{
    snprintf(buf, cap, " ");
    for (const char *p = text; (p = strstr(p, "--")) != NULL;) {
        const char *q = p + 2;
        while (isalnum((unsigned char)*q) || *q == '-')
            q++;
        if (q - p > 2 && (p == text || !isalnum((unsigned char)p[-1]))) {
            char opt[64];
            snprintf(opt, sizeof opt, " %.*s ", (int)(q - p), p);
            if (!strstr(buf, opt) && strlen(buf) + strlen(opt) < cap)
                strcat(buf, opt + 1);
        }
        p = q;
    }
}

static char *run_capture(const char *args)
{
    char cmd[512], outp[256];
    snprintf(outp, sizeof outp, "%s/help.out", dir);
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s' 2>&1 </dev/null", bin, args, outp);
    if (system(cmd) != 0)
        return NULL;
    return slurp_file(outp);
}

/* Every command's --help options appear in README, and every option a README example gives a
 * command is in that command's --help. */
static void test_help(const char *readme)
{
    static const char *commands[] = {"demo",    "import", "datasets", "show",    "rm",
                                     "train",   "runs",   "eval",     "predict", "export",
                                     "summary", "hosts",  "bench"};
    static char helps[sizeof commands / sizeof *commands][8192];
    char *global = run_capture("--help");
    char gopts[1024];
    options_in(global ? global : "", gopts, sizeof gopts);
    free(global);

    for (size_t c = 0; c < sizeof commands / sizeof *commands; c++) {
        char args[64];
        snprintf(args, sizeof args, "%s --help", commands[c]);
        char *help = run_capture(args);
        if (!help) {
            ok(strcmp(commands[c], "hosts") == 0, "%s --help runs", commands[c]);
            continue;
        }
        char *opts = helps[c];
        options_in(help, opts, sizeof helps[c]);
        free(help);
        char missing[2048] = "";
        char *copy = strdup(opts), *save = NULL;
        for (char *o = strtok_r(copy, " ", &save); o; o = strtok_r(NULL, " ", &save)) {
            int found = 0;
            for (const char *p = readme; !found && (p = strstr(p, o)) != NULL; p += strlen(o))
                found = !isalnum((unsigned char)p[strlen(o)]) && p[strlen(o)] != '-';
            if (!found && strlen(missing) + strlen(o) + 2 < sizeof missing) {
                strcat(missing, " ");
                strcat(missing, o);
            }
        }
        free(copy);
        ok(!missing[0], "README names every option of %s --help%s%s", commands[c],
           missing[0] ? ": it lacks" : "", missing);
    }

    /* README's commands, in every sh block, run or not. */
    for (int i = 0; i < nblocks; i++) {
        if (strcmp(blocks[i].lang, "sh") != 0)
            continue;
        char *copy = strdup(blocks[i].text), *save = NULL;
        int lineno = blocks[i].line;
        for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
            lineno++;
            char *hash = strstr(l, " #");
            if (hash)
                *hash = '\0';
            const char *p = strstr(l, "nnlab ");
            if (!p || (p != l && p[-1] != ' ' && p[-1] != '/'))
                continue;
            /* The command: the first word after nnlab that is not a global option. */
            char word[32] = "";
            const char *w = p + 6;
            while (*w) {
                while (*w == ' ')
                    w++;
                int n = (int)strcspn(w, " ");
                if (n == 0)
                    break;
                if (w[0] == '-' || (w > p + 6 && strncmp(w - 5, "--db ", 5) == 0)) {
                    w += n;
                    continue;
                }
                snprintf(word, sizeof word, "%.*s", n, w);
                break;
            }
            int c = -1;
            for (size_t k = 0; k < sizeof commands / sizeof *commands; k++)
                if (strcmp(word, commands[k]) == 0)
                    c = (int)k;
            if (c < 0)
                continue;
            char used[1024];
            options_in(p, used, sizeof used);
            char unknown[512] = "", *s2 = NULL;
            for (char *o = strtok_r(used, " ", &s2); o; o = strtok_r(NULL, " ", &s2)) {
                char key[80];
                snprintf(key, sizeof key, " %s ", o);
                if (!strstr(helps[c], key) && !strstr(gopts, key) &&
                    strlen(unknown) + strlen(o) + 2 < sizeof unknown) {
                    strcat(unknown, " ");
                    strcat(unknown, o);
                }
            }
            if (unknown[0])
                ok(0, "README.md:%d: nnlab %s takes%s", lineno, word, unknown);
        }
        free(copy);
    }
    ok(1, "README's commands checked against their --help");
}

int main(void)
{
    bin = getenv("NNLAB_BIN");
    src = getenv("NNLAB_SOURCE_ROOT");
    if (!bin || access(bin, X_OK) != 0 || !src)
        skip_all("NNLAB_BIN and NNLAB_SOURCE_ROOT name the binary and the source tree");
    char path[512];
    snprintf(path, sizeof path, "%s/README.md", src);
    char *readme = slurp_file(path);
    if (!readme)
        skip_all("cannot read %s", path);
    char *copy = strdup(readme);
    parse_blocks(copy);

    snprintf(dir, sizeof dir, "/tmp/nnlab-readme-XXXXXX");
    if (!mkdtemp(dir))
        skip_all("cannot make a temporary directory");
    test_help(readme);

    struct stat st;
    if (stat(FASHION, &st) != 0) {
        ok(1, "# SKIP the examples: they need dataset-fashion-mnist");
    } else {
        char cmd[1024];
        snprintf(work, sizeof work, "%s/work", dir);
        snprintf(cmd, sizeof cmd,
                 "mkdir -p '%s/work' '%s/home' '%s/data' && ln -s '%s/tests' '%s/work/tests' && "
                 "ln -s '%s/data' '%s/work/data'",
                 dir, dir, dir, src, dir, src, dir);
        ok(system(cmd) == 0, "a fresh folder, HOME and store");
        char env[4096], bindir[512];
        snprintf(bindir, sizeof bindir, "%s", bin);
        char *slash = strrchr(bindir, '/');
        if (slash)
            *slash = '\0';
        snprintf(env, sizeof env, "%s:%s", bindir, getenv("PATH") ? getenv("PATH") : "/usr/bin");
        setenv("PATH", env, 1);
        snprintf(env, sizeof env, "%s/home", dir);
        setenv("HOME", env, 1);
        snprintf(env, sizeof env, "%s/data", dir);
        setenv("XDG_DATA_HOME", env, 1);
        if (getenv("NNLAB_README_FULL") && strcmp(getenv("NNLAB_README_FULL"), "1") == 0) {
            unsetenv("NNLAB_EPOCHS_MAX");
            unsetenv("NNLAB_TRAIN_SAMPLES");
        } else {
            setenv("NNLAB_EPOCHS_MAX", "1", 1);
            setenv("NNLAB_TRAIN_SAMPLES", "3000", 1);
            acc_tol = ACC_TOL_SHORT;
        }
        diag("examples run in %s/work (trainings %s)", dir,
             acc_tol == ACC_TOL ? "as written" : "shortened: 1 epoch, 3000 images");
        test_examples();
    }

    for (int i = 0; i < nblocks; i++)
        free(blocks[i].text);
    free(copy);
    free(readme);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        diag("could not remove %s", dir);
    return done_testing();
}
