#!/usr/bin/env python3
"""Writes a C file that holds the shipped model specs (data/models/*) as strings, so that
`--model lenet` works from any binary, installed or not.  Usage: embed_models.py OUT.c SPEC..."""
import os
import sys

out, specs = sys.argv[1], sorted(sys.argv[2:], key=os.path.basename)
with open(out, "w", encoding="utf-8") as f:
    f.write("/* Generated from data/models by core/embed_models.py; do not edit. */\n")
    f.write("#include <stddef.h>\n\n")
    f.write("const char *const nl_shipped_models[][2] = {\n")
    for path in specs:
        with open(path, encoding="utf-8") as s:
            text = s.read()
        literal = "".join(
            "\\n\"\n    \"" if c == "\n" else ("\\" + c if c in "\"\\" else c) for c in text)
        f.write('    {"%s",\n    "%s"},\n' % (os.path.basename(path), literal))
    f.write("    {NULL, NULL},\n};\n")
