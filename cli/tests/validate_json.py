"""Checks generated outputs with the `jsonschema` validator (cli/tests/serve_structured.rs runs it).

    python validate_json.py < cases.json

Reads a list of {"text": ..., and "schema": {...} or "regex": "..."}; prints a list with, per
case, null when the text parses and validates (or matches the regex whole) and else why not.
"""

import json
import re
import sys

import jsonschema


def check(case):
    text = case["text"]
    if "regex" in case:
        return None if re.fullmatch(case["regex"], text) else f"{text!r} does not match {case['regex']!r}"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        return f"{text!r} is not JSON: {e}"
    validator = jsonschema.Draft202012Validator(case["schema"], format_checker=jsonschema.FormatChecker())
    errors = [e.message for e in validator.iter_errors(value)]
    return f"{text!r}: {'; '.join(errors)}" if errors else None


print(json.dumps([check(c) for c in json.load(sys.stdin)]))
