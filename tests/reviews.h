/* A synthetic review corpus for the text tests: three classes of documents (neg, neutral, pos)
 * that mix words of their class, some of them Greek and Cyrillic, into common ones. */
#ifndef NNLAB_TESTS_REVIEWS_H
#define NNLAB_TESTS_REVIEWS_H

#include <stdint.h>
#include <stdio.h>

#include "nnlab/rng.h"

enum { REVIEW_CLASSES = 3 };

static const char *const review_classes[REVIEW_CLASSES] = {"neg", "neutral", "pos"};
static const char *const review_common[] = {
    "the",    "a",     "film",   "movie", "plot", "actor",  "story", "scene", "was",
    "is",     "and",   "of",     "it",    "this", "really", "just",  "very",  "Film",
    "camera", "music", "ending", "CAST",  "role", "script", "είναι", "это",   "director",
};
static const char *const review_words[REVIEW_CLASSES][6] = {
    {"awful", "boring", "terrible", "Worst", "ужасно", "κακό"},
    {"average", "okay", "fine", "mediocre", "обычно", "μέτριο"},
    {"great", "wonderful", "superb", "Loved", "отлично", "υπέροχο"},
};

/* A document of class k into f: nwords words drawn from r, about one in five a class word,
 * parted by spaces and, one time in seven, a comma (", " for a CSV field, ",\n" for a file of its
 * own); after the last word "!" (CSV) or ".\n". */
static inline void review_write(FILE *f, int k, struct nl_rng *r, int nwords, int csv)
{
    const uint64_t ncommon = sizeof review_common / sizeof review_common[0];
    for (int i = 0; i < nwords; i++) {
        const char *w = nl_rng_next(r) % 5 == 0 ? review_words[k][nl_rng_next(r) % 6]
                                                : review_common[nl_rng_next(r) % ncommon];
        fprintf(f, "%s%s", i ? (nl_rng_next(r) % 7 == 0 ? (csv ? ", " : ",\n") : " ") : "", w);
    }
    if (nwords)
        fputs(csv ? "!" : ".\n", f);
}

#endif
