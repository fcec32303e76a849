"""The developers' guide's sizes: a module under ~400 lines, a class under ~200 (issue 39): a module or class past
them holds more than one concern, or more than a newcomer reads at once."""
from __future__ import annotations

import ast

from test_import_graph import PACKAGE


def test_every_module_of_the_package_is_under_400_lines_and_every_class_under_200():
    over = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        name = path.relative_to(PACKAGE.parent)
        if text.count("\n") >= 400:
            over.append(f"{name}: {text.count(chr(10))} lines")
        over += [f"{name}: class {node.name}: {node.end_lineno - node.lineno + 1} lines"
                 for node in ast.walk(ast.parse(text)) if isinstance(node, ast.ClassDef)
                 and node.end_lineno is not None and node.end_lineno - node.lineno + 1 > 200]
    assert over == []
