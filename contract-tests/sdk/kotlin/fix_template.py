"""Writes openapi-generator's kotlin data_class template, with one fix, into OUT_DIR (a templateDir).

Usage: fix_template.py OUT_DIR

The stock template (kotlin-client/data_class.mustache, gson with oneOf wrappers) validates a
required field that is a model, an enum or an enum reference without checking for JSON null, so
`finish_reason: null` or `usage: null` (required, nullable) throws, and the oneOf wrapper around
the event then matches no branch: no stream event decodes. The fix prefixes those three checks
with a null test when the field is nullable; nothing else changes. It is read from the jar that
runs, so it follows the pinned generator, and it fails when that template no longer has the three
checks it fixes.
"""
import os
import sys
import zipfile

import openapi_generator_cli

JAR = os.path.join(os.path.dirname(openapi_generator_cli.__file__), "openapi-generator.jar")
CHECK = "            // validate the required field `{{{baseName}}}`\n            "
FIELD = 'jsonObj["{{#lambda.escapeDollar}}{{baseName}}{{/lambda.escapeDollar}}"]'
GUARD = "{{#isNullable}}if (!" + FIELD + ".isJsonNull) {{/isNullable}}"

template = zipfile.ZipFile(JAR).read("kotlin-client/data_class.mustache").decode()
found = template.count(CHECK)
if found != 3:
    sys.exit(f"fix_template.py: expected 3 required-field checks in kotlin-client/data_class.mustache, found {found}")
os.makedirs(sys.argv[1], exist_ok=True)
with open(os.path.join(sys.argv[1], "data_class.mustache"), "w") as out:
    out.write(template.replace(CHECK, CHECK + GUARD))
