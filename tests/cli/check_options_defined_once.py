#!/usr/bin/env python3
"""Fails when a command-line option is defined twice in tools/.

Every `kiln` option that more than one command takes is defined once, by a helper of
tools/kiln/cli.cc, so that its name, help and checks cannot drift apart between commands. This
script reads each add_option / add_flag call in tools/**/*.cc and lists every dashed name
("--fusion", "-o", "!--no-rewrites") that more than one call defines.

Usage: check_options_defined_once.py SOURCE_DIR
"""
import collections
import pathlib
import re
import sys

CALL = re.compile(r'add_(?:option|flag)\(\s*"([^"]+)"')


def main() -> int:
    root = pathlib.Path(sys.argv[1])
    places = collections.defaultdict(list)
    for path in sorted((root / "tools").rglob("*.cc")):
        text = path.read_text()
        for match in CALL.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            for name in match.group(1).split(","):
                name = name.strip().lstrip("!")
                if name.startswith("-"):
                    places[name].append(f"{path.relative_to(root)}:{line}")
    twice = {name: where for name, where in places.items() if len(where) > 1}
    for name, where in sorted(twice.items()):
        print(f"{name} is defined {len(where)} times: {', '.join(where)}")
    if not places:
        print("no options found: the pattern no longer matches the code")
        return 1
    print(f"options: {len(places)} names, {len(twice)} defined more than once")
    return 1 if twice else 0


if __name__ == "__main__":
    sys.exit(main())
