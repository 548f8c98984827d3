"""The `judge` command: turn annotation guidelines into rubric files and run them as an LLM judge."""

from __future__ import annotations

import argparse

import json
import os
import sys
import textwrap

from judge.errors import JudgeError

EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130
EXIT_BATCH_PENDING = 3  # --batch-dir: batch files await a runner; the same command resumes
# Verbs defined in other modules, each with `register(subparsers)`. They must not import heavy libraries (pandas,
# scipy, matplotlib) at module level: every `judge` command builds the whole parser.
VERB_MODULES = ("calibration.cli", "calibration.study.cli", "calibration.trust.cli", "judge.annotation.cli",
                "judge.batch_cli")


def _command(sub, name: str, help: str, example: str) -> argparse.ArgumentParser:
    return sub.add_parser(
        name,
        help=help,
        description=help,
        epilog="example:\n" + textwrap.indent(textwrap.dedent(example).strip(), "  "),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _csv_list(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags shared by every verb that calls a model."""
    g = parser.add_argument_group("model")
    g.add_argument("--backend", choices=["local", "openai", "vllm"], default=None,
                   help="local: embedded llama.cpp server with a small bundled model (the default without --base-url); "
                        "openai: any (the default with --base-url) "
                        "OpenAI-compatible server (hosted API, vllm serve, llama.cpp server); vllm: in-process engine")
    g.add_argument("--model", help="model name on the server (openai), a .gguf file (local; default: bundled "
                                   "SmolLM2-135M), or a Hugging Face model folder or name (vllm)")
    g.add_argument("--base-url", action="append", default=None, metavar="URL",
                   help="server URL, e.g. http://127.0.0.1:8000/v1; repeat it for replicas of one model, each with "
                        "--concurrency requests in flight, the least loaded healthy one answering (default: "
                        "$JUDGE_BASE_URLS, comma-separated, else $OPENAI_BASE_URL, else the OpenAI API)")
    g.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                   help="environment variable holding the API key (keys are never taken from flags, nor written anywhere)")
    g.add_argument("--client", choices=["auto", "sdk", "aiohttp"], default="auto",
                   help="HTTP client: the OpenAI SDK, or aiohttp for self-hosted servers; auto = SDK for https, aiohttp for http")
    g.add_argument("--concurrency", type=int, default=None,
                   help="requests in flight at once, per server with several --base-url (default 16; 256 for "
                        "--backend vllm, whose batches are made of the requests in flight)")
    g.add_argument("--timeout", type=float, default=None,
                   help="seconds per request before it is retried once (default 120; 600 for the local and vllm backends, "
                        "whose long answers on a CPU take minutes)")
    g.add_argument("--temperature", type=float, default=None, help="default 0, or 1.0 with --samples > 1")
    g.add_argument("--max-tokens", type=int, default=None,
                   help="answer length limit (default: what the answer schema can need, priced for the rubric's language)")
    g.add_argument("--seed", type=int, default=0, help="sampling seed; sample k uses seed+k (default 0)")
    g.add_argument("--samples", type=int, default=1, help="answers per judgment; score = their mean (default 1)")
    g.add_argument("--logprobs", action="store_true",
                   help="score = expected value over the scale's points from the score token's log-probabilities")
    g.add_argument("--response-format", choices=["json_schema", "json_object", "text"], default="json_schema",
                   help="strongest structured-output mode to try first; weaker ones are used if the server refuses")
    g.add_argument("--cache", metavar="DIR", help="answer cache directory (default: the user cache dir)")
    g.add_argument("--no-cache", action="store_true", help="neither read nor write the answer cache")
    g.add_argument("--refresh", action="store_true",
                   help="ask the model anew: read no answer from the cache (fresh ones replace the stored ones) and "
                        "redo lines of --output that came from it; for re-judging a drift anchor set")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    e = parser.add_argument_group("vLLM engine (--backend vllm)")
    e.add_argument("--tensor-parallel-size", type=int, default=1, metavar="N", help="GPUs to split the model over (default 1)")
    e.add_argument("--max-model-len", type=int, default=None, metavar="TOKENS",
                   help="context length (prompt + answer); a longer prompt fails its judgment (default: the model's)")
    e.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"], default="auto",
                   help="weights and activations (default auto: the model's; float32 is the fastest on most CPUs)")
    e.add_argument("--gpu-memory-utilization", type=float, default=None, metavar="FRACTION",
                   help="share of GPU memory vLLM may take (default: vLLM's, 0.9)")
    b = parser.add_argument_group("batch (judge/backends/batch.py)")
    b.add_argument("--batch", action="store_true",
                   help="send the requests through the server's Batch API (/v1/files, /v1/batches: half price on "
                        "OpenAI, answers within 24 h); a manifest next to --output lets a rerun resume, never resubmit")
    b.add_argument("--batch-dir", metavar="DIR",
                   help="write the requests as OpenAI batch files into DIR and stop, saying what to run (e.g. "
                        "`vllm run-batch` on each node); rerun the same command to record the *.out.jsonl answers")
    b.add_argument("--shards", type=int, default=None, metavar="N",
                   help="with --batch-dir: split each round into N files, one per node (default 1)")
    # --base-url replaces the environment's URLs rather than adding to them, so they live in their own field.
    parser.set_defaults(base_urls_from_env=_csv_list(os.environ.get("JUDGE_BASE_URLS"))
                        or _csv_list(os.environ.get("OPENAI_BASE_URL")))


def _check_url(url: str, what: str) -> None:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise JudgeError(f"{what}: not a server URL; give it as http://HOST:PORT/v1 (or https://...)")


def _env_urls(value: str) -> list[str]:
    """$JUDGE_BASE_URLS, comma-separated; blank, another separator or a bad URL is an error naming the value (a
    blank one must not fall back to the hosted API)."""
    what = f"$JUDGE_BASE_URLS={value!r}"
    if not value.strip():
        raise JudgeError(f"{what} is blank: set it to server URLs separated by commas, or unset it")
    urls = _csv_list(value)
    if any(";" in url or any(c.isspace() for c in url) for url in urls):
        raise JudgeError(f"{what}: separate the URLs with commas (e.g. http://a:8000/v1,http://b:8000/v1)")
    for url in urls:
        _check_url(url, what)
    return urls


def check_model_arguments(args) -> None:
    """Refuse contradictory or meaningless model flags before anything starts; fill in the defaults that depend on
    the backend."""
    from_env = os.environ.get("JUDGE_BASE_URLS")
    if from_env is not None and not args.base_url:
        args.base_urls_from_env = _env_urls(from_env)
    for url in args.base_url or []:
        _check_url(url, f"--base-url {url}")
    if args.backend is None:
        # A URL given for this tool (the flag, or $JUDGE_BASE_URLS) means a server; $OPENAI_BASE_URL alone may be
        # set for other tools, so it does not replace the zero-setup default, but it is not ignored silently.
        args.backend = "openai" if args.base_url or os.environ.get("JUDGE_BASE_URLS") else "local"
        if args.backend == "local" and args.base_urls_from_env:
            print("note: $OPENAI_BASE_URL is set, but without --backend openai the embedded model judges",
                  file=sys.stderr)
    elif args.backend == "local" and args.base_url:
        raise JudgeError("--base-url names a server, but --backend local starts the embedded one: "
                         "use --backend openai with --base-url, or drop --base-url")
    if args.concurrency is None:
        args.concurrency = 256 if args.backend == "vllm" else 16
    if args.timeout is None:
        args.timeout = 120.0 if args.backend == "openai" else 600.0
    problems = [
        (args.samples < 1, "--samples must be at least 1, got {samples}"),
        (args.concurrency < 1, "--concurrency must be at least 1, got {concurrency}"),
        (not args.timeout > 0, "--timeout must be more than 0 seconds, got {timeout:g}"),
        (args.max_tokens is not None and args.max_tokens < 1, "--max-tokens must be at least 1, got {max_tokens}"),
        (args.temperature is not None and not 0 <= args.temperature <= 2,
         "--temperature must be between 0 and 2, got {temperature:g}"),
        (args.tensor_parallel_size < 1, "--tensor-parallel-size must be at least 1, got {tensor_parallel_size}"),
        (args.max_model_len is not None and args.max_model_len < 1,
         "--max-model-len must be at least 1 token, got {max_model_len}"),
        (args.gpu_memory_utilization is not None and not 0 < args.gpu_memory_utilization <= 1,
         "--gpu-memory-utilization must be a fraction above 0 and at most 1, got {gpu_memory_utilization:g}"),
        (getattr(args, "refresh", False) and args.no_cache,
         "--refresh writes fresh answers to the cache that --no-cache turns off: give one of them"),
    ]
    for bad, message in problems:
        if bad:
            raise JudgeError(message.format(**vars(args)))


def temperature_of(args) -> float:
    """--temperature as given, else 0 for one sample and 1.0 for several (re-asks must be able to differ)."""
    return args.temperature if args.temperature is not None else (0.0 if args.samples == 1 else 1.0)


def _settings(args, model: str, backend: str, mode: str, swap: bool, where: str):
    from judge.settings import Settings

    return Settings(
        model=model, backend=backend, temperature=temperature_of(args), max_tokens=args.max_tokens, samples=args.samples,
        logprobs=args.logprobs, seed=args.seed, concurrency=args.concurrency, timeout=args.timeout,
        response_format=args.response_format, template=getattr(args, "template", None), mode=mode, swap=swap,
        where=where,
    )


def _cache(args):
    from judge.cache import AnswerCache, NoCache, RefreshCache, default_cache_dir

    if args.no_cache:
        return NoCache()
    return (RefreshCache if getattr(args, "refresh", False) else AnswerCache)(args.cache or default_cache_dir())


# -- verbs ------------------------------------------------------------------------------------------------
def run_rubrics(args) -> int:
    from judge.rubric import available_rubrics, load_rubric

    if not args.name:
        for name in available_rubrics():
            r = load_rubric(name)
            print(f"{r.name:<20} {r.task:<9} {r.language:<3} v{r.version:<4} {', '.join(c.id for c in r.criteria)}")
        return 0
    r = load_rubric(args.name)
    print(f"{r.ref}  task={r.task}  language={r.language}  inputs={', '.join(r.inputs)}\n{r.title}\n")
    for c in r.criteria:
        flags = [f for f, on in (("needs reference", c.needs_reference), ("gated", c.gate)) if on]
        print(f"[{c.id}] {c.name} ({c.scale.type}{'; ' + ', '.join(flags) if flags else ''})")
        print(textwrap.indent(textwrap.fill(c.definition, 100), "  "))
        if c.gate:
            print(f"  gate, asked once per dialogue: {c.gate.question}")
        if c.scale.type == "likert":
            for p in c.scale.points:
                print(f"    {p.value} {p.label}: {p.meaning}")
        else:
            for lab in c.scale.labels:
                print(f"    {lab.value!r}{' (abstains)' if lab.abstain else ''}: {lab.meaning}")
        print()
    return 0


def run_render(args) -> int:
    from judge.items import load_items
    from judge.prompting import criterion_messages, gate_messages, segment_messages
    from judge.rubric import load_rubric

    rubric = load_rubric(args.rubric)
    items = load_items(args.input, rubric.inputs)
    item = next((i for i in items if i.id == args.id), None) if args.id else items[0]
    if item is None:
        raise JudgeError(f"{args.input}: no item with id {args.id!r}")
    out = []
    for c in rubric.select(_csv_list(args.criteria)):
        if c.gate:
            out.append({"criterion": c.id, "kind": "gate", "messages": gate_messages(rubric, c, item)})
        segment = None
        if c.per_segment:
            if not item.segments:
                out.append({"criterion": c.id, "kind": "split", "messages": segment_messages(rubric, item)})
            segment = item.segments[0] if item.segments else "(each segment the split returns)"
        messages = criterion_messages(rubric, c, item, args.template, segment=segment, segment_number=1 if segment else None)
        out.append({"criterion": c.id, "kind": "judge", "messages": messages})
    if args.json:
        print(json.dumps(out, ensure_ascii=False, indent=2))
        return 0
    for block in out:
        print(f"===== {block['criterion']} ({block['kind']}) — item {item.id}, system {item.system} =====")
        for m in block["messages"]:
            print(f"--- {m['role']} ---\n{m['content']}\n")
    return 0


def _stale_message(output: str, stale: dict) -> str:
    from collections import Counter

    reasons = Counter(reason for found in stale.values() for reason in found)
    what = "; ".join(f"{reason} ({n})" for reason, n in reasons.most_common(4))
    first = next(iter(stale))
    return (f"{output}: {len(stale)} finished judgments were made differently from what this run would ask ({what}; "
            f"first: id {first[0]!r}, system {first[1]!r}, criterion {first[2]!r}); reusing them would mix results: "
            f"add --redo-changed to judge them again (their lines are replaced), or choose another --output")


LONG_ITEM_CHARS = 40_000  # about 10k tokens: more than many context windows, and costly on a paid API


def _preflight(args, rubric, criteria, items, mode: str) -> None:
    """What can be found wrong before a server starts or a file is created: a template that does not render, and
    items so long that their prompts may not fit."""
    from judge.items import oversized
    from judge.judging import block_letters
    from judge.prompting import block_messages, criterion_messages

    first = items[0]
    for criterion in criteria:
        if mode == "block" and not criterion.per_segment:
            group = [i for i in items if i.id == first.id]
            block_messages(rubric, criterion, group, block_letters(len(group)))
        else:
            criterion_messages(rubric, criterion, first, getattr(args, "template", None),
                               segment="…" if criterion.per_segment else None,
                               segment_number=1 if criterion.per_segment else None)
    if long := oversized(items, LONG_ITEM_CHARS):
        where = ", ".join(f"line {o.line} ({o.chars:,} characters)" for o in long[:3])
        print(f"warning: {len(long)} item(s) of {getattr(args, 'input', 'the items')} hold more than {LONG_ITEM_CHARS:,} characters of text "
              f"({where}{', ...' if len(long) > 3 else ''}): about a token per 4 characters, their prompts may exceed "
              "the model's context (those judgments then fail with the server's reason) and cost more",
              file=sys.stderr)


def _planned_model(args) -> str | None:
    """The model id the judgments will carry, known before any server starts (None: known only once opened)."""
    if getattr(args, "batch", False) or getattr(args, "batch_dir", None) or args.backend != "local":
        return args.model
    from judge.backends import local

    return local.model_id(local.resolve_model(args.model))


def _run(args, rubric, criteria, items, output: str, mode: str, swap: bool = True):
    """Run the engine over items into `output`; returns the tally, or None when interrupted.

    Everything that can refuse the run (flags, template, the results file, stale judgments) is checked and the
    work is planned before a backend is opened: a rerun with nothing left to do starts no server."""
    from judge.backends import open_backend
    from judge.backends.batch import BatchPending
    from judge.engine import Engine, Tally, run_coroutine
    from judge.errors import OutputError, ServerUnusable
    from judge.results import ResultsFile
    from judge.secrets import Redactor

    check_model_arguments(args)
    if getattr(args, "input", None) and os.path.exists(output) and os.path.samefile(args.input, output):
        raise OutputError(f"{output}: --output is the --input file; choose another --output")
    _preflight(args, rubric, criteria, items, mode)
    results = ResultsFile(output)  # refuses a file that is not ours before any server starts
    redact = Redactor(os.environ.get(args.api_key_env))

    def plan(client, model: str, backend: str, where: str):
        engine = Engine(client, _settings(args, model, backend, mode, swap, where), cache, rubric, redact)
        return engine, *engine.plan(criteria, items)

    cache = _cache(args)
    try:
        model = _planned_model(args)
        if model is not None:
            _, units, fingerprints = plan(None, model, args.backend, "")
            # Only "nothing to do" is decided here; what is refused is refused once the backend has checked its
            # own flags (a bad --model is reported before a stale file).
            if (not results.stale(fingerprints) and all(key in results.done for key in fingerprints)
                    and not (getattr(args, "refresh", False) and results.from_cache(fingerprints))):
                results.start()
                print(f"nothing to do: all {len(fingerprints)} judgments are in {output}", file=sys.stderr)
                return Tally(planned=len(fingerprints), already_done=len(fingerprints), keys=list(fingerprints))
        with open_backend(args) as opened:
            engine, units, fingerprints = plan(opened.client, opened.model, opened.backend, opened.where)
            stale = results.stale(fingerprints)
            if stale and not args.redo_changed:
                raise OutputError(_stale_message(output, stale))
            if other := results.other_judge(rubric.ref, opened.model, replaced=set(stale)):
                raise OutputError(other)
            served_from_cache = results.from_cache(fingerprints) if getattr(args, "refresh", False) else set()
            results.start(redo=set(stale) | served_from_cache)
            if stale:
                print(f"redoing {len(stale)} judgments made differently (--redo-changed)", file=sys.stderr)
            if served_from_cache:
                print(f"redoing {len(served_from_cache)} judgments answered from the cache (--refresh)",
                      file=sys.stderr)

            async def go():
                try:
                    return await engine.run(units, results, progress=not args.no_progress)
                finally:
                    await opened.client.aclose()

            try:
                tally = run_coroutine(go)
            except KeyboardInterrupt:
                print(f"\ninterrupted: finished judgments are saved in {output}; run the same command to resume",
                      file=sys.stderr)
                return None
            except BatchPending as exc:
                print(exc, file=sys.stderr)
                return exc
            except ServerUnusable as exc:
                raise ServerUnusable(f"{exc}; the judgments finished so far are kept in {output}: run the same "
                                     "command to resume once the server is fixed") from None
            tally.keys = list(fingerprints)
    finally:
        results.close()
        cache.close()
    print(tally.line(), file=sys.stderr)
    for warning in tally.warnings():
        print(warning, file=sys.stderr)
    if tally.failed:
        reasons = ", ".join(f"{n}× {why}" for why, n in tally.errors.most_common(3))
        print(f"{tally.failed} judgments failed ({reasons}); their lines carry the error and the raw answer; "
              f"run the same command again to retry them", file=sys.stderr)
    return tally


def _exit_code(tally) -> int:
    if tally is not None and not hasattr(tally, "failed"):
        return EXIT_BATCH_PENDING
    return EXIT_INTERRUPTED if tally is None else EXIT_FAILED if tally.failed else 0


def judge_items(args):
    """`judge score` and `judge compare` (args.command), for the CLI and for judge.score / judge.compare alike:
    the tally, None when interrupted, or the BatchPending note."""
    from judge.items import load_items
    from judge.rubric import load_rubric

    rubric = load_rubric(args.rubric)
    pairwise = args.command == "compare"
    if rubric.task == "pairwise" and not pairwise:
        raise JudgeError(f"rubric {rubric.name!r} compares pairs: use `judge compare`")
    if rubric.task != "pairwise" and pairwise:
        raise JudgeError(f"rubric {rubric.name!r} is not a pairwise rubric: use `judge score`")
    if not pairwise:
        criteria = rubric.select(_csv_list(args.criteria))
    items = load_items(args.input, rubric.inputs)
    if pairwise:
        if single := next((i for i in items if not i.is_pair), None):
            raise JudgeError(f"{args.input}:{single.line}: item {single.id!r} has no candidate_1/candidate_2 pair")
        criteria = rubric.select(_csv_list(args.criteria))
        return _run(args, rubric, criteria, items, args.output, "pairwise", swap=not args.no_swap)
    if args.mode == "block" and args.logprobs:
        raise JudgeError("--logprobs needs --mode pointwise: a block answer holds many score tokens")
    return _run(args, rubric, criteria, items, args.output, args.mode)


def run_score(args) -> int:
    return _exit_code(judge_items(args))


run_compare = run_score


def run_qualify(args) -> int:
    import tempfile

    from judge.items import Item
    from judge.judgment import read_judgments
    from judge.qualification import qualification_report
    from judge.rubric import load_rubric

    rubric = load_rubric(args.rubric)
    if rubric.qualification is None:
        raise JudgeError(f"rubric {rubric.name!r} ships no qualification set")
    items = [Item.model_validate(q.model_dump(exclude={"expected"})) for q in rubric.qualification.items]
    criteria = [c for c in rubric.criteria if any(c.id in q.expected for q in rubric.qualification.items)]
    mode = "pairwise" if rubric.task == "pairwise" else "pointwise"
    with tempfile.TemporaryDirectory() as scratch:
        output = args.output or f"{scratch}/qualification.jsonl"
        tally = _run(args, rubric, criteria, items, output, mode)
        if tally is None or not hasattr(tally, "failed"):  # interrupted, or batch files await a runner
            return _exit_code(tally)
        records = [judgment for _, judgment in read_judgments(output)]
    table, passed = qualification_report(rubric, records)
    print(table)
    return 0 if passed and not tally.failed else EXIT_FAILED


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="judge",
        description=__doc__,
        epilog="Run `judge VERB --help` for a verb's flags and an example.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="VERB")

    p = _command(sub, "rubrics", "List the bundled rubrics, or show one's criteria and scales.",
                 "judge rubrics\njudge rubrics call_centre_fr")
    p.add_argument("name", nargs="?", help="rubric name or path to a rubric YAML file")
    p.set_defaults(run=run_rubrics)

    p = _command(sub, "render", "Print the exact messages the judge would receive for one item; no model is called.",
                 "judge render --rubric dialsummeval --input examples/items.jsonl --criteria coherence")
    p.add_argument("--rubric", required=True, help="rubric name (see `judge rubrics`) or YAML path")
    p.add_argument("--input", required=True, help="items, JSONL or CSV")
    p.add_argument("--id", help="render this item id instead of the first item")
    p.add_argument("--criteria", help="comma-separated criterion ids (default: all)")
    p.add_argument("--template", help="a Jinja2 template file to use instead of the rubric's")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(run=run_render)

    p = _command(sub, "score", "Judge every (item, criterion) and append one JSON line per judgment to --output.",
                 """
                 # zero setup: the embedded llama.cpp server with the bundled small model
                 judge score --rubric dialsummeval --input examples/items.jsonl --output judgments.jsonl
                 # any OpenAI-compatible server (vllm serve, llama.cpp server, hosted APIs; key from $OPENAI_API_KEY)
                 judge score --rubric call_centre_fr --input examples/items.jsonl --output out.jsonl \\
                     --backend openai --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-7B-Instruct --concurrency 64
                 Re-running the same command resumes: finished judgments are skipped, failed ones retried.""")
    p.add_argument("--rubric", required=True, help="rubric name (see `judge rubrics`) or YAML path")
    p.add_argument("--input", required=True, help="items, JSONL or CSV: id, dialogue, candidate, system[, reference]")
    p.add_argument("--output", required=True, help="judgments JSONL; appended to, and resumed from")
    p.add_argument("--criteria", help="comma-separated criterion ids (default: all of the rubric's)")
    p.add_argument("--template", help="a Jinja2 template file to use instead of the rubric's")
    p.add_argument("--redo-changed", action="store_true",
                   help="judge again the finished judgments in --output that this run would ask differently (edited "
                        "items, another template, model or decoding); without it such a file is refused")
    p.add_argument("--mode", choices=["pointwise", "block"], default="pointwise",
                   help="pointwise: one candidate per request (default); block: all candidates of a dialogue in one "
                        "request, in an order shuffled per dialogue by --seed, as annotators saw them")
    add_model_arguments(p)
    p.set_defaults(run=run_score)

    p = _command(sub, "compare", "Judge pairs of candidates (1 / 2 / 0 for a tie), in both orders by default.",
                 """
                 judge compare --rubric pairwise_summary --input examples/pairs.jsonl --output verdicts.jsonl
                 Items have candidate_1, candidate_2 (and system_1, system_2). Verdicts are reported in the input's
                 order; when the two orders disagree the verdict is a tie and the line says order_disagreement.
                 Identical candidates tie without a model call.""")
    p.add_argument("--rubric", required=True, help="a pairwise rubric, e.g. pairwise_summary")
    p.add_argument("--input", required=True, help="pairs, JSONL or CSV")
    p.add_argument("--output", required=True, help="verdicts JSONL; appended to, and resumed from")
    p.add_argument("--criteria", help="comma-separated criterion ids (default: all)")
    p.add_argument("--template", help="a Jinja2 template file to use instead of the rubric's")
    p.add_argument("--redo-changed", action="store_true",
                   help="judge again the finished judgments in --output that this run would ask differently (edited "
                        "items, another template, model or decoding); without it such a file is refused")
    p.add_argument("--no-swap", action="store_true", help="ask only the input's order (half the cost, no bias check)")
    add_model_arguments(p)
    p.set_defaults(run=run_compare)

    p = _command(sub, "qualify", "Run a rubric's qualification set and say whether the judge passes, per criterion.",
                 """
                 judge qualify --rubric pairwise_summary --backend openai --base-url http://127.0.0.1:8000/v1 --model M
                 Exit code 0 when every criterion reaches the rubric's threshold.""")
    p.add_argument("--rubric", required=True, help="rubric name or YAML path (it must have a qualification block)")
    p.add_argument("--output", help="keep the qualification judgments in this JSONL file")
    p.add_argument("--redo-changed", action="store_true", help="as for `judge score`")
    add_model_arguments(p)
    p.set_defaults(run=run_qualify)

    import importlib

    for module in VERB_MODULES:
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except JudgeError as exc:
        print(f"judge {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `judge rubrics | head`: the reader has gone; say nothing more (and let Python not complain at exit).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"judge {args.command}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
