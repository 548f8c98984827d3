"""Judging one unit of work: one criterion on one candidate (pointwise or per topic segment), on all candidates of a
dialogue at once (block), or on a pair in both orders (pairwise); with the applicability gates they share.

The modes build prompts (judge/prompting.py), ask through the asking layer (judge/asking.py), and turn answers
into typed `Judgment`s (judge/judgment.py). They never see the backend, the cache or the results file.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import statistics
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from judge.answers import AnswerFormat, BlockFormat, SegmentsFormat, expected_score, token_budget, verdict_probabilities
from judge.asking import Answer, Asker, add_usage
from judge.backends import Usage
from judge.errors import AnswerError, BackendError, Deferred, RetryableError
from judge.items import Item
from judge.judgment import Judgment, SegmentVerdict, digest, fingerprint_of
from judge.prompting import block_messages, criterion_messages, gate_messages, segment_messages, template_sources
from judge.rubric import Criterion, Rubric
from judge.settings import Settings

SWAP_BACK = {"1": "2", "2": "1", "0": "0"}
# What a single judgment may fail with; anything else (ServerUnusable, a bug) stops the run.
JUDGMENT_FAILURES = (AnswerError, RetryableError, BackendError)
ITEM_DIGESTS = 4096  # item digests kept for the fingerprints of the next criteria and passes


@dataclass(frozen=True)
class Judged:
    judgment: Judgment
    cached: bool  # every answer it needed came from the cache (or an identical request in flight)


def block_letters(n: int) -> list[str]:
    """A, B, ... Z, then AA, AB, ...: how candidates are named inside one block."""
    letters = list(string.ascii_uppercase)
    return [letters[i] if i < 26 else letters[i // 26 - 1] + letters[i % 26] for i in range(n)]


def block_order(seed: int, dialogue_id: str, items: list[Item]) -> list[Item]:
    """The order a dialogue's candidates are shown in: shuffled per dialogue, reproducible from the seed."""
    shown = list(items)
    random.Random(f"{seed}:{dialogue_id}").shuffle(shown)
    return shown


# The first message of the last prompt hashed (the same system prompt) and its hash state, as one tuple: read and
# replaced whole, so a run in another thread can never pair one prompt with another's hash.
_prefix: tuple = (None, None)


def _prompt_sha(messages: list[dict]) -> str:
    """The messages' digest (separators no template writes); the system prompt, the same object in every prompt of
    a criterion, hashed once."""
    global _prefix
    if not messages:
        return hashlib.sha256(b"").hexdigest()[:16]
    first, prefix = messages[0]["content"], _prefix
    if prefix[0] is not first:
        prefix = _prefix = (first, hashlib.sha256(f"{messages[0]['role']}\x1f{first}".encode()))
    digest = prefix[1].copy()
    for m in messages[1:]:
        digest.update(f"\x1e{m['role']}\x1f{m['content']}".encode())
    return digest.hexdigest()[:16]


class Judge:
    def __init__(self, asker: Asker, settings: Settings, rubric: Rubric):
        self.asker = asker
        self.settings = settings
        self.rubric = rubric
        self._shared: dict[tuple, asyncio.Task] = {}  # gate answers and segment splits, once per dialogue/candidate
        self._item_digests: dict[tuple, str] = {}
        self._base = fingerprint_of(rubric_ref=rubric.ref, template=template_sources(settings.template),
                                    **settings.decoding())
        header = rubric.model_dump(exclude={"criteria", "qualification"})
        # A criterion's part: its rubric text and the answer it asks for (schema and token budget), so that a new
        # version of the tool that asks differently does not reuse an old line.
        self._rubric_parts = {c.id: digest([header, c.model_dump(), self._answer_spec(c)]) for c in rubric.criteria}
        self._formats = {c.id: AnswerFormat.for_criterion(c) for c in rubric.criteria}  # asked for at every judgment
        self._demonstrations = rubric.demonstration_items()

    # -- fingerprints: what a resumed run compares before reusing a line ------------------------------------
    def _answer_spec(self, criterion: Criterion) -> list:
        fmt = AnswerFormat.for_criterion(criterion)
        return [fmt.json_schema(), token_budget(fmt, self.rubric.language)]

    def fingerprint(self, criterion: Criterion, item: Item, group: list[Item] | None = None) -> dict:
        parts = self.item_fingerprint(criterion.id, self.item_digest(item))
        if group is not None:  # a block's prompt shows every candidate of the dialogue
            parts["context"] = digest([self.item_digest(i) for i in group])
        return parts

    def format_of(self, criterion: Criterion) -> AnswerFormat:
        return self._formats[criterion.id]

    def item_fingerprint(self, criterion_id: str, item_digest: str) -> dict:
        """A pointwise judgment's fingerprint from its item's digest (kept in --batch-dir's key file)."""
        return {**self._base, "rubric": self._rubric_parts[criterion_id], "item": item_digest}

    def fingerprint_parts(self, criteria: list[Criterion]) -> list:
        """What every judgment's fingerprint takes from the run, for these criteria (all but the item)."""
        return [self._base, [(c.id, self._rubric_parts[c.id]) for c in criteria]]

    def item_digest(self, item: Item) -> str:
        """The item's part of its judgments' fingerprints."""
        key = (item.id, item.system)
        if len(self._item_digests) >= ITEM_DIGESTS:  # a run streams its items: keep the recent ones only
            self._item_digests.clear()
        if key not in self._item_digests:
            self._item_digests[key] = digest(item.model_dump(mode="json", exclude_none=True))
        return self._item_digests[key]

    # -- shared, once-per-dialogue work ----------------------------------------------------------------------
    def _once(self, key: tuple, make) -> asyncio.Future:
        """A task started the first time `key` is asked for and shared by every later caller."""
        task = self._shared.get(key)
        deferred = task is not None and task.done() and not task.cancelled() and isinstance(task.exception(), Deferred)
        if task is None or deferred:  # a question deferred to a batch is asked again in the next pass
            task = self._shared[key] = asyncio.ensure_future(make())
            # Its failure reaches every caller; if the run stops first, asyncio must not report it as unretrieved.
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return asyncio.shield(self._shared[key])

    async def not_applicable(self, criterion: Criterion, item: Item) -> str | None:
        """Why the criterion is N/A for this item (a field condition, or the dialogue's gate said no), or None."""
        if criterion.only_when and not criterion.applies_to(item.fields):
            return f"applies only when {criterion.only_when}"
        if criterion.gate is None:
            return None
        # Rendered inside the shared task: only the dialogue's first candidate pays for it.
        answer = await self._once(("gate", item.id, criterion.id), lambda: self.asker.ask(
            gate_messages(self.rubric, criterion, item), AnswerFormat.gate()))
        if answer.parsed["answer"] == "no":
            return answer.parsed["rationale"] or criterion.gate.na_reason
        return None

    async def _segments(self, item: Item) -> list[str]:
        if item.segments:
            return item.segments
        answer = await self._once(("segments", item.id, item.system), lambda: self.asker.ask(
            segment_messages(self.rubric, item), SegmentsFormat(source_chars=len(item.candidate or ""))))
        return answer.parsed

    async def _samples(self, messages: list[dict], fmt) -> list[Answer]:
        if self.settings.samples == 1:  # the common case: no task per judgment (-12% CPU on a cached rerun)
            return [await self.asker.ask(messages, fmt, 0)]
        return list(await asyncio.gather(*(self.asker.ask(messages, fmt, k) for k in range(self.settings.samples))))

    # -- building judgments ------------------------------------------------------------------------------------
    def _judgment(self, criterion: Criterion, item: Item, fingerprint: dict, **fields) -> Judgment:
        pair: dict[str, Any] = ({"system_1": item.system_1, "system_2": item.system_2}
                                if item.is_pair and item.system_1 else {})
        if item.id in self._demonstrations.get(criterion.id, ()):
            fields["demonstration"] = True  # a label of this dialogue is in the prompt: never a label again
        return Judgment(id=item.id, system=item.system, criterion=criterion.id, rubric=self.rubric.ref,
                        model=self.settings.model, backend=self.settings.backend, fingerprint=fingerprint,
                        **pair, **fields)

    def _failure(self, criterion: Criterion, item: Item, fingerprint: dict, exc: Exception) -> Judged:
        redact = self.asker.redact
        if isinstance(exc, AnswerError):
            fields = {"error": redact(str(exc)), "raw": redact(exc.raw)}
        else:
            fields = {"error": redact(f"{type(exc).__name__}: {exc}")}
        return Judged(self._judgment(criterion, item, fingerprint, **fields), False)

    @staticmethod
    def _provenance(prompt_sha: str, answers: list[Answer]) -> dict:
        """prompt_sha, the tokens this judgment cost now (cached answers cost nothing), and what the server said
        about itself when it answered (`served`, kept with the answer in the cache)."""
        usage: Usage = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": None}
        for answer in answers:
            if not answer.cached:
                add_usage(usage, answer.completion["usage"])
        served = next((a.completion["served"] for a in answers if a.completion.get("served")), None)
        return {"prompt_sha": prompt_sha, "usage": usage, "served": served,
                "from_cache": any(a.stored for a in answers) or None}

    def _verdict(self, criterion: Criterion, fmt: AnswerFormat, parsed: list[dict],
                 completions: Sequence[Mapping[str, Any]] | None = None) -> dict:
        """Score or label from one answer per sample: the mean (and spread) of points, or the majority label."""
        verdicts = [p[fmt.verdict_key] for p in parsed]
        fields: dict = {"samples": verdicts}
        if fmt.numeric:
            points = [float(v) for v in verdicts]
            if self.settings.logprobs and completions:
                per_sample = [verdict_probabilities(c.get("logprobs") or [], fmt) for c in completions]
                usable = [p for p in per_sample if p is not None]
                if usable:
                    fields["probs"] = {k: sum(p[k] for p in usable) / len(usable) for k in usable[0]}
                    points = [expected_score(p) for p in usable]
            fields["score"] = statistics.fmean(points)
            fields["spread"] = statistics.stdev(points) if len(points) > 1 else None
            chosen = 0
        else:
            # Majority label; ties go to the label seen first, so the result does not depend on dict order.
            counts = Counter(verdicts)
            label = max(counts, key=lambda v: (counts[v], -verdicts.index(v)))
            chosen = verdicts.index(label)
            fields["label"] = label
            fields["score"] = criterion.scale.score_of(label)
            fields["abstained"] = criterion.scale.type == "categorical" and any(
                c.value == label and c.abstain for c in criterion.scale.labels)
        fields["rationale"] = parsed[chosen].get("rationale")
        fields["explanation"] = parsed[chosen].get("explanation")
        return fields

    # -- the modes -----------------------------------------------------------------------------------------------
    async def pointwise(self, criterion: Criterion, item: Item, planned) -> Judged:
        """One criterion, one candidate: as a whole, or per topic segment. `planned`: its unit of work
        (judge.engine.Unit), whose fingerprint is made only when a judgment is."""
        try:
            if (why := await self.not_applicable(criterion, item)) is not None:
                return Judged(self._judgment(criterion, item, planned.fingerprints[0], na=True, rationale=why),
                              True)
            if criterion.per_segment:
                return await self._per_segment(criterion, item, planned)
            messages = criterion_messages(self.rubric, criterion, item, self.settings.template)
            fmt = self._formats[criterion.id]
            try:
                answers = await self._samples(messages, fmt)
            except Deferred as deferred:  # what was asked, for --batch-dir's key file (`asked`)
                deferred.question = (messages, fmt)
                raise
        except JUDGMENT_FAILURES as exc:
            return self._failure(criterion, item, planned.fingerprints[0], exc)
        return self._pointwise(criterion, item, planned.fingerprints[0], _prompt_sha(messages), answers)

    def _pointwise(self, criterion: Criterion, item, fingerprint: dict, prompt_sha: str,
                   answers: list[Answer]) -> Judged:
        """The judgment from one plain question's answers (one per sample). `item`: an Item, or what a key file
        keeps of one (`id`, `system`, not a pair)."""
        fields = self._verdict(criterion, self._formats[criterion.id], [a.parsed for a in answers],
                               [a.completion for a in answers])
        judgment = self._judgment(criterion, item, fingerprint, **fields, **self._provenance(prompt_sha, answers))
        return Judged(judgment, all(a.cached for a in answers))

    def recorded(self, criterion: Criterion, id_: str, system: str, item_digest: str, prompt_sha: str,
                 answers: list[Answer]) -> Judged:
        """A pointwise judgment from its answers and what --batch-dir's key file kept of its question."""
        return self._pointwise(criterion, SimpleNamespace(id=id_, system=system, is_pair=False),
                               self.item_fingerprint(criterion.id, item_digest), prompt_sha, answers)

    def asked(self, deferred: Deferred) -> tuple[str, list[str]] | None:
        """(prompt_sha, the request key of each sample) of the plain question a judgment deferred, or None (a gate,
        a segment split: not one plain question)."""
        if deferred.question is None:
            return None
        messages, fmt = deferred.question
        if self.settings.samples == 1 and deferred.key:
            return _prompt_sha(messages), [deferred.key]
        return _prompt_sha(messages), [self.asker.body(messages, fmt, k).key for k in range(self.settings.samples)]

    async def _per_segment(self, criterion: Criterion, item: Item, planned) -> Judged:
        """Each topic segment judged on its own; the candidate's score is the mean over segments with a score."""
        segments = await self._segments(item)
        fmt = self._formats[criterion.id]
        asked = [criterion_messages(self.rubric, criterion, item, self.settings.template, segment=text,
                                    segment_number=n) for n, text in enumerate(segments, start=1)]
        answered = await asyncio.gather(*(self._samples(m, fmt) for m in asked))
        per_segment, every = [], []
        for text, answers in zip(segments, answered):
            verdict = self._verdict(criterion, fmt, [a.parsed for a in answers], [a.completion for a in answers])
            per_segment.append(SegmentVerdict(text=text, score=verdict["score"], label=verdict.get("label"),
                                              rationale=verdict["rationale"]))
            every += answers
        scores = [s.score for s in per_segment if s.score is not None]
        judgment = self._judgment(criterion, item, planned.fingerprints[0],
                                  score=statistics.fmean(scores) if scores else None,
                                  samples=[s.score for s in per_segment], segments=per_segment,
                                  **self._provenance(_prompt_sha(asked[0]), every))
        return Judged(judgment, all(a.cached for a in every))

    async def block(self, criterion: Criterion, group: list[Item], planned, todo: set[str]) -> list[Judged]:
        """All candidates of one dialogue in one prompt, in an order shuffled per dialogue by the seed.

        The full block is always shown (so a resumed run asks the very same, cached, question); judgments are
        returned only for the systems in `todo`, in the input's order, each with the letter it was shown under.
        `planned`: the unit of work (judge.engine.Unit), whose `fingerprints` (one per item of `group`) are made
        only when a judgment is.
        """
        position = {i.system: n for n, i in enumerate(group)}

        def prints(system: str) -> dict:
            return planned.fingerprints[position[system]]
        out, shown = [], []
        try:
            for item in group:
                why = await self.not_applicable(criterion, item)
                if why is None:
                    shown.append(item)
                elif item.system in todo:
                    out.append(Judged(self._judgment(criterion, item, prints(item.system), na=True, rationale=why),
                                      True))
            if not shown:
                return out
            shown = block_order(self.settings.seed, group[0].id, shown)
            letters = block_letters(len(shown))
            messages = block_messages(self.rubric, criterion, shown, letters)
            fmt = BlockFormat(self._formats[criterion.id], tuple(letters))
            answers = await self._samples(messages, fmt)
        except JUDGMENT_FAILURES as exc:
            failed = [i for i in (shown or group) if i.system in todo]
            return out + [self._failure(criterion, i, prints(i.system), exc) for i in failed]
        provenance = self._provenance(_prompt_sha(messages), answers)
        cached = all(a.cached for a in answers)
        for letter, item in zip(letters, shown):
            if item.system not in todo:
                continue
            fields = self._verdict(criterion, fmt.inner, [a.parsed[letter] for a in answers])
            out.append(Judged(self._judgment(criterion, item, prints(item.system), **fields, **provenance,
                                             position=letter), cached))
            provenance = {**provenance, "usage": {"prompt_tokens": 0, "completion_tokens": 0,
                                                  "cached_tokens": None}}  # counted once
        return sorted(out, key=lambda j: position[j.judgment.system])

    async def pair(self, criterion: Criterion, item: Item, planned) -> Judged:
        """Which of two candidates is better, asked in both orders unless `swap` is off.

        Identical candidates tie without a model call. The verdict is reported in the input's order; when the two
        orders disagree it is a tie, and the judgment says so (position bias).
        """
        # run() refuses an item of one candidate for a pairwise rubric, and an item without one has both
        assert item.candidate_1 is not None and item.candidate_2 is not None, "a pair has two candidates"
        if " ".join(item.candidate_1.split()) == " ".join(item.candidate_2.split()):
            return Judged(self._judgment(criterion, item, planned.fingerprints[0], label="0", samples=["0"],
                                         identical=True, rationale="identical candidates tie"), True)
        fmt = self._formats[criterion.id]
        template = self.settings.template
        forward = criterion_messages(self.rubric, criterion, item, template)
        swapped = item.model_copy(update={"candidate_1": item.candidate_2, "candidate_2": item.candidate_1})
        try:
            orders = [self._samples(forward, fmt)]
            if self.settings.swap:
                orders.append(self._samples(criterion_messages(self.rubric, criterion, swapped, template), fmt))
            answered = await asyncio.gather(*orders)
        except JUDGMENT_FAILURES as exc:
            return self._failure(criterion, item, planned.fingerprints[0], exc)
        every = [a for answers in answered for a in answers]
        first = self._verdict(criterion, fmt, [a.parsed for a in answered[0]])
        fields = {**first, **self._provenance(_prompt_sha(forward), every)}
        if self.settings.swap:
            # Read the swapped answers back into the input's order: "1" there means the input's second candidate.
            back = [{**a.parsed, "label": SWAP_BACK[a.parsed["label"]]} for a in answered[1]]
            second = self._verdict(criterion, fmt, back)
            disagree = first["label"] != second["label"]
            fields.update(label="0" if disagree else first["label"], samples=first["samples"] + second["samples"],
                          orders={"forward": first["label"], "swapped": second["label"]}, order_disagreement=disagree)
        if (probs := self._pair_probs(fmt, answered, fields["samples"])) is not None:
            fields["probs"] = probs
        return Judged(self._judgment(criterion, item, planned.fingerprints[0], **fields), all(a.cached for a in every))

    def _pair_probs(self, fmt: AnswerFormat, answered: list[list[Answer]], samples: list[str]) -> dict | None:
        """How likely each verdict ("1", "2", "0", in the input's order) is, over both orders: from the verdict
        token's log-probabilities with --logprobs, else from the samples' shares with --samples > 1 (a confidence
        `judge escalate` can use); None otherwise."""
        if self.settings.logprobs:
            usable = []
            for n, answers in enumerate(answered):
                for answer in answers:
                    p = verdict_probabilities(answer.completion.get("logprobs") or [], fmt)
                    if p is not None:
                        usable.append({SWAP_BACK[k] if n else k: v for k, v in p.items()})
            if usable:
                return {k: sum(p.get(k, 0.0) for p in usable) / len(usable) for k in sorted(usable[0])}
        if self.settings.samples > 1:
            return {label: samples.count(label) / len(samples) for label in sorted(set(map(str, fmt.allowed)))}
        return None
