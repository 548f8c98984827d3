"""`judge batch status|cancel --output OUT`: the batches a `--batch` run submitted (read from its manifest)."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap


def register(sub) -> None:
    p = sub.add_parser(
        "batch", help="List or cancel the Batch API batches of a `--batch` run (from the manifest next to --output).",
        description="List or cancel the Batch API batches of a `--batch` run (from the manifest next to --output).",
        epilog="examples:\n" + textwrap.indent(
            "# a run on a provider's Batch API (half price; answers within 24 h), then its batches\n"
            "judge score --rubric dialsummeval --input examples/items.jsonl --output fluency.jsonl "
            "--criteria fluency \\\n"
            "    --batch --base-url https://api.openai.com/v1 --model gpt-4o-mini\n"
            "judge batch status --output fluency.jsonl\n"
            "judge batch cancel --output fluency.jsonl", "  "),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["status", "cancel"], help="status: each batch's state and counts; cancel: "
                   "cancel those not finished (their finished answers are kept: the rerun collects them)")
    p.add_argument("--output", required=True, help="the --output of the `--batch` run")
    p.add_argument("--base-url", metavar="URL", help="the server the batches went to, in full: needed only when its "
                   "URL carried credentials, which the manifest does not keep (or set $OPENAI_BASE_URL)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR", help="environment variable with the key")
    p.set_defaults(run=run_batch)


def run_batch(args) -> int:
    import openai

    from judge.backends.batch import public_url
    from judge.backends.batch_api import FINAL, read_manifest, sdk_client
    from judge.errors import BackendError, JudgeError
    from judge.secrets import Redactor

    manifest = read_manifest(args.output)
    server = manifest.get("server")
    base_url = None if server in (None, "the OpenAI API") else server
    api_key = os.environ.get(args.api_key_env)
    if args.base_url:
        if public_url(args.base_url) != public_url(base_url):  # compared without credentials, never shown
            raise JudgeError(f"--base-url is not the server the batches went to ({server})")
        base_url = args.base_url
    client = sdk_client(base_url, api_key, sync=True)
    redact = Redactor(api_key)
    try:
        for entry in manifest["batches"]:
            if not entry.get("batch_id"):
                print(f"file {entry['file_id']}: uploaded, no batch ({entry.get('requests')} requests)")
                continue
            batch = client.batches.retrieve(entry["batch_id"])
            if args.action == "cancel" and batch.status not in FINAL and batch.status != "cancelling":
                batch = client.batches.cancel(entry["batch_id"])
            counts = batch.request_counts
            done = f"{counts.completed}/{counts.total} completed, {counts.failed} failed" if counts else "no counts"
            print(f"{batch.id} round {entry.get('round')}: {batch.status}, {done}")
    except openai.APIError as exc:
        raise BackendError(redact(f"{server}: {exc}")) from None
    finally:
        client.close()
    if args.action == "cancel":
        print(f"cancelled batches keep their finished answers: rerun the judging command to record them and send "
              f"the rest again (manifest {args.output}.batches.json)", file=sys.stderr)
    return 0
