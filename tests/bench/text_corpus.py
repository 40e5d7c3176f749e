#!/usr/bin/python3
"""Writes a synthetic review corpus in the IMDB layout, for timing `nnlab import` on text (a
benchmark's input, not a test): OUT/{train,test}/{neg,pos}/N_K.txt, N documents in all, half
train and half test, half of each negative; each document 50 to 400 words of a 5,000-word
vocabulary of made-up words (Zipf-distributed) with, one word in ten, a word of its class, in
sentences of 5 to 20 words. Seeded: the same corpus every time.

  tests/bench/text_corpus.py /tmp/reviews 25000
  /usr/bin/time -v build/app/nnlab --db /tmp/reviews.db import reviews /tmp/reviews
"""
import os
import random
import sys


def main():
    out, n = sys.argv[1], int(sys.argv[2])
    rng = random.Random(7)
    letters = "abcdefghijklmnoprstuvwyz"
    vocab = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(5000)]
    weights = [1.0 / (k + 1) for k in range(len(vocab))]
    cls = {"neg": ["awful", "boring", "terrible", "worst", "dull"],
           "pos": ["great", "wonderful", "superb", "loved", "brilliant"]}
    for i in range(n):
        split = "train" if i < n // 2 else "test"
        label = "neg" if i % 2 == 0 else "pos"
        folder = os.path.join(out, split, label)
        os.makedirs(folder, exist_ok=True)
        nwords = rng.randint(50, 400)
        words = rng.choices(vocab, weights, k=nwords)
        for j in range(0, nwords, 10):
            words[j] = rng.choice(cls[label])
        text, start = [], 0
        while start < nwords:
            end = min(nwords, start + rng.randint(5, 20))
            sentence = " ".join(words[start:end])
            text.append(sentence[0].upper() + sentence[1:] + ".")
            start = end
        with open(os.path.join(folder, "%d_%d.txt" % (i, 1 + i % 10)), "w") as f:
            f.write(" ".join(text) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
