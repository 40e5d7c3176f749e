#!/usr/bin/env python3
"""Writes a C file that holds the shipped model specs (data/models/*) as strings, so that
`--model lenet` works from any binary, installed or not.  Usage: embed_models.py OUT.c SPEC...

Each spec is a char array written as character constants rather than a string literal: ISO C requires
compilers to take string literals of only 4095 characters (-Woverlength-strings), and the specs of
torchvision's models are longer."""
import os
import sys

out, specs = sys.argv[1], sorted(sys.argv[2:], key=os.path.basename)
with open(out, "w", encoding="utf-8") as f:
    f.write("/* Generated from data/models by core/engine/embed_models.py; do not edit. */\n")
    f.write("#include <stddef.h>\n\n")
    for i, path in enumerate(specs):
        with open(path, "rb") as s:
            data = s.read() + b"\0"
        f.write("static const char spec%d[] = {\n" % i)
        for at in range(0, len(data), 16):
            f.write("    " + ", ".join("'\\x%02x'" % b for b in data[at:at + 16]) + ",\n")
        f.write("};\n\n")
    f.write("const char *const nl_shipped_models[][2] = {\n")
    for i, path in enumerate(specs):
        f.write('    {"%s", spec%d},\n' % (os.path.basename(path), i))
    f.write("    {NULL, NULL},\n};\n")
