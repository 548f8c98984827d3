"""What every statistics function returns (calibrate, screen, estimate, audit, drift, select), and the one CLI
layer over them: tables as DataFrames on the result; `files()` the exact --output-dir files, `text()` what the
CLI prints, `report_html()` its HTML section; `write()` and `report()` replace only files this tool wrote.
"""

from __future__ import annotations

import html
import sys
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, TypeVar


class Result:
    verb: ClassVar[str]  # the CLI verb: names the writer of its files and the page title
    warnings: list[str]

    def files(self) -> dict[str, str]:
        raise NotImplementedError

    def text(self) -> str:
        raise NotImplementedError

    def report_html(self) -> str:
        """The report's HTML section (matplotlib is imported only here)."""
        raise NotImplementedError

    def page(self) -> str:
        """The self-contained report page: the section, its plots embedded as data URIs."""
        from .html_kit import STYLE

        title = html.escape(f"Judge {self.verb}")
        return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{title}</title>"
                f"<style>{STYLE}</style></head><body><h1>{title}</h1>{self.report_html()}</body></html>")

    def check_output_dir(self, output_dir, inputs=()) -> None:
        """Refuse, before anything is written, a folder where one of `files()` is not ours (or is an input)."""
        from judge.outputs import check_folder

        check_folder(output_dir, self.files(), inputs=inputs)

    def write(self, output_dir, inputs=()) -> list[Path]:
        """Write `files()` into `output_dir`; returns the files replaced (written by an earlier run)."""
        from judge.outputs import write_folder

        self.check_output_dir(output_dir, inputs)
        files: dict[str, str | bytes] = dict(self.files())
        return write_folder(output_dir, files, verb=self.verb, inputs=inputs)

    def report(self, path, inputs=()) -> list[Path]:
        """Write the report page to `path` (a new file, or one this tool wrote); returns the files replaced."""
        from judge.outputs import write_files

        return write_files({Path(path): self.page()}, verb=self.verb, inputs=inputs)

    def __str__(self) -> str:
        return self.text()


R = TypeVar("R", bound=Result)


def run_verb(verb: str, compute: Callable[[], R], *, output_dir, report, inputs,
             exit_code: Callable[[R], int] = lambda result: 0,
             footer: Callable[[R], str] | None = None) -> int:
    """The CLI of a statistics verb: every output path checked before any is written, then the tables and the
    report, then what the verb prints (and `footer` on stderr); bad input, or a run that stopped (batch answers
    awaited), is one line and its exit code (judge.errors.exit_with: 2, 3)."""
    from judge.errors import JudgeError, Stopped, exit_with
    from judge.outputs import check_writable

    inputs = [p for p in inputs if p]
    try:
        if report:
            # before a long computation, not after; a report of another verb is not ours to replace
            check_writable(report, inputs=inputs, what="--report", page=True, verb=verb)
        result = compute()
        if output_dir:
            result.check_output_dir(output_dir, inputs)
        page = result.page() if report else None
        replaced = result.write(output_dir, inputs) if output_dir else []
        if page is not None:
            from judge.outputs import write_files

            replaced += write_files({Path(report): page}, verb=verb, inputs=inputs)
    except (JudgeError, Stopped, OSError) as exc:  # CalibrationError and OutputError are JudgeErrors
        return exit_with(verb, exc)
    print(result.text(), end="")
    for warning in result.warnings:
        print(f"judge {verb}: warning: {warning}", file=sys.stderr)
    if replaced:
        print(f"replaced (written by an earlier run): {', '.join(map(str, replaced))}", file=sys.stderr)
    if footer is not None:
        print(footer(result), file=sys.stderr)
    return exit_code(result)
