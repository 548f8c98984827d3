"""The stub chat server (tests/stub_server.py) plus the OpenAI Batch API: `/v1/files` and `/v1/batches`, as the
OpenAI API reference documents them, for the real `openai` SDK to drive.

- POST /v1/files (multipart: `file`, `purpose=batch`), GET /v1/files/{id}, GET /v1/files/{id}/content;
- POST /v1/batches (`input_file_id`, `endpoint`, `completion_window` "24h", `metadata`), GET /v1/batches/{id},
  POST /v1/batches/{id}/cancel, GET /v1/batches (a list page).

A batch moves one status per retrieve: `validating` -> `in_progress` -> `finalizing` -> `completed` (or `failed`
when validation finds a bad line: its `errors.data` names the line and the reason); the output file holds one
line per answered request (`{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error":
null}`, a 4xx in the body included), the error file the requests that got an error object (`"response": null,
"error": {"code", "message"}`), among them `batch_expired` / `batch_cancelled` for requests never run. Answers are
the stub's (same content and usage as its online chat endpoint).

Knobs (attributes of `BatchControl`, set with `server.batch.<name> = ...`):
  instant        complete at the first retrieve (benchmarks)
  hold           stay `in_progress` (a run waiting, to be killed or cancelled)
  expire_after   answer this many requests, then end `expired`
  line_faults    [(kind, times)] consumed in order over request lines: "400" (error in the response body),
                 "error" (a retryable `server_error` object), "cut" (the answer's JSON cut in half)
  models         models the Batch API accepts (None: any); another fails validation at its first line
  disabled       no batch endpoints at all (404, like `vllm serve`)
  lose_create    this many batch creations answer 502 after the batch was created (the answer lost on the way)
  refuse_create  this many batch creations answer 502 without creating anything
  shuffle        output lines in a shuffled order (answers are matched by custom_id, never by position)
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field

from aiohttp import web
from stub_server import StubServer, _answer_from_prompt, _answer_from_schema, _completion, changed_question, request_id

ENDPOINT = "/v1/chat/completions"


@dataclass
class BatchControl:
    instant: bool = False
    hold: bool = False
    expire_after: int | None = None
    line_faults: list = field(default_factory=list)
    models: set | None = None
    disabled: bool = False
    lose_create: int = 0
    refuse_create: int = 0
    shuffle: bool = False  # output lines in another order than the requests (the API promises no order)


class BatchServer(StubServer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batch = BatchControl()
        self.files: dict[str, dict] = {}
        self.batches: dict[str, dict] = {}
        self.created = 0  # batches created
        self.uploads = 0
        self.lines_answered = 0
        self._ids = itertools.count(1)
        self._fault_step = [0, 0]

    # -- files
    def _file(self, data: bytes, filename: str, purpose: str) -> dict:
        file_id = f"file-{next(self._ids):06d}"
        meta = {"id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                "filename": filename, "purpose": purpose, "status": "processed"}
        self.files[file_id] = {"meta": meta, "data": data}
        return meta

    async def post_file(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload, purpose = form.get("file"), form.get("purpose")
        if purpose != "batch" or upload is None or not hasattr(upload, "file"):
            return _error(400, "purpose must be 'batch' and a file must be given", "purpose")
        self.uploads += 1
        return web.json_response(self._file(upload.file.read(), upload.filename, purpose))

    async def get_file(self, request: web.Request) -> web.Response:
        found = self.files.get(request.match_info["id"])
        return web.json_response(found["meta"]) if found else _error(404, "No such File object")

    async def get_file_content(self, request: web.Request) -> web.Response:
        found = self.files.get(request.match_info["id"])
        if not found:
            return _error(404, "No such File object")
        return web.Response(body=found["data"], content_type="application/octet-stream")

    # -- batches
    def _disabled(self) -> web.Response | None:
        return _error(404, "Not Found") if self.batch.disabled else None

    async def post_batch(self, request: web.Request) -> web.Response:
        if (refused := self._disabled()) is not None:
            return refused
        data = await request.json()
        if data.get("input_file_id") not in self.files:
            return _error(400, f"No such File object: {data.get('input_file_id')}", "input_file_id")
        if data.get("endpoint") != ENDPOINT or data.get("completion_window") != "24h":
            return _error(400, "endpoint must be /v1/chat/completions and completion_window 24h", "endpoint")
        if self.batch.refuse_create > 0:
            self.batch.refuse_create -= 1
            return _error(502, "Bad gateway")
        self.created += 1
        batch_id = f"batch_{next(self._ids):06d}"
        now = int(time.time())
        self.batches[batch_id] = {
            "id": batch_id, "object": "batch", "endpoint": ENDPOINT, "errors": None,
            "input_file_id": data["input_file_id"], "completion_window": "24h", "status": "validating",
            "output_file_id": None, "error_file_id": None, "created_at": now, "in_progress_at": None,
            "expires_at": now + 86400, "finalizing_at": None, "completed_at": None, "failed_at": None,
            "expired_at": None, "cancelling_at": None, "cancelled_at": None,
            "request_counts": {"total": 0, "completed": 0, "failed": 0}, "metadata": data.get("metadata"),
            "_lines": [], "_results": [],
        }
        if self.batch.lose_create > 0:  # created, but the client never hears of it
            self.batch.lose_create -= 1
            return _error(502, "Bad gateway")
        return web.json_response(_public(self.batches[batch_id]))

    async def get_batch(self, request: web.Request) -> web.Response:
        if (refused := self._disabled()) is not None:
            return refused
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return _error(404, "No such batch")
        self._advance(batch)
        return web.json_response(_public(batch))

    async def cancel_batch(self, request: web.Request) -> web.Response:
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return _error(404, "No such batch")
        if batch["status"] in ("validating", "in_progress", "finalizing"):
            batch["status"], batch["cancelling_at"] = "cancelling", int(time.time())
        return web.json_response(_public(batch))

    async def list_batches(self, request: web.Request) -> web.Response:
        if (refused := self._disabled()) is not None:
            return refused
        data = [_public(b) for b in reversed(self.batches.values())]
        limit = int(request.query.get("limit", 20))
        return web.json_response({"object": "list", "data": data[:limit], "first_id": data[0]["id"] if data else None,
                                  "last_id": data[min(limit, len(data)) - 1]["id"] if data else None,
                                  "has_more": len(data) > limit})

    # -- the batch's life
    def _advance(self, batch: dict) -> None:
        now, status = int(time.time()), batch["status"]
        if status == "validating":
            problem = self._validate(batch)
            if problem is not None:
                batch.update(status="failed", failed_at=now, errors={"object": "list", "data": [problem]})
                return
            batch.update(status="in_progress", in_progress_at=now)
            batch["request_counts"]["total"] = len(batch["_lines"])
            if not self.batch.instant:
                return
            status = "in_progress"
        if status == "in_progress":
            if self.batch.hold:
                return
            limit = self.batch.expire_after
            todo = batch["_lines"][len(batch["_results"]):]
            if limit is not None:
                todo = todo[: max(0, limit - len(batch["_results"]))]
            for line in todo:
                batch["_results"].append(self._run_line(line))
            self._count(batch)
            if limit is not None and len(batch["_results"]) < len(batch["_lines"]):
                self._close(batch, "expired", "batch_expired", "This request could not be executed before the "
                                                               "completion window expired.")
                return
            batch.update(status="finalizing", finalizing_at=now)
            if not self.batch.instant:
                return
            status = "finalizing"
        if status == "finalizing":
            self._close(batch, "completed", None, None)
            batch["completed_at"] = now
        elif status == "cancelling":
            self._close(batch, "cancelled", "batch_cancelled", "This request was not executed because the batch "
                                                               "was cancelled.")

    def _validate(self, batch: dict) -> dict | None:
        text = self.files[batch["input_file_id"]]["data"].decode("utf-8")
        seen = set()
        for number, raw in enumerate(text.splitlines(), start=1):
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:
                return {"code": "invalid_json_line", "line": number, "message": "This line is not parseable as "
                        "valid JSON.", "param": None}
            if line.get("custom_id") in seen:
                return {"code": "duplicate_custom_id", "line": number, "param": "custom_id",
                        "message": "The custom_id for this request is a duplicate of another request."}
            seen.add(line.get("custom_id"))
            if line.get("method") != "POST" or line.get("url") != ENDPOINT:
                return {"code": "invalid_url", "line": number, "param": "url",
                        "message": "The URL provided for this request does not match the batch endpoint."}
            model = (line.get("body") or {}).get("model")
            if self.batch.models is not None and model not in self.batch.models:
                return {"code": "model_not_found", "line": number, "param": "body.model",
                        "message": f"The provided model '{model}' is not supported by the Batch API."}
            batch["_lines"].append(line)
        return None

    def _line_fault(self) -> str | None:
        script, step = self.batch.line_faults, self._fault_step
        while step[0] < len(script):
            kind, times = script[step[0]]
            if times < 0 or step[1] < times:
                step[1] += 1
                return kind
            step[0], step[1] = step[0] + 1, 0
        return None

    def _run_line(self, line: dict) -> dict:
        """One request through the stub's answer logic, as a batch output or error record."""
        body, custom_id = line["body"], line["custom_id"]
        record = {"id": f"batch_req_{next(self._ids):06d}", "custom_id": custom_id}
        key = request_id(body.get("messages", []), body.get("seed"))
        self.stats.total += 1
        self.stats.received[key] += 1
        rf = (body.get("response_format") or {}).get("type", "text")
        self.stats.formats[rf] += 1
        fault = self._line_fault()
        if fault == "error":
            return {**record, "response": None, "error": {"code": "server_error", "message": "The server had an "
                                                                                               "error processing it."}}
        if fault == "400":
            error = {"error": {"message": "This model's maximum context length is 16 tokens; the messages hold more.",
                               "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}
            return {**record, "response": {"status_code": 400, "request_id": "req_x", "body": error}, "error": None}
        last = changed_question(key, self.config.changed_share)  # as the online endpoint answers the same question
        if rf == "json_schema":
            answer = _answer_from_schema(body["response_format"]["json_schema"]["schema"], self.config.gate_answer,
                                         last)
        else:
            answer = _answer_from_prompt(body.get("messages", []), self.config.gate_answer, last)
        content = json.dumps(answer, ensure_ascii=False)
        if fault == "cut":
            completion = _completion(body, content[: len(content) // 2], "stop", None)
        else:
            completion = _completion(body, content, "stop", answer)
            self.stats.answered[key] += 1
        self.lines_answered += 1
        return {**record, "response": {"status_code": 200, "request_id": f"req_{record['id']}", "body": completion},
                "error": None}

    def _count(self, batch: dict) -> None:
        ok = sum(1 for r in batch["_results"] if r["error"] is None and r["response"]["status_code"] == 200)
        batch["request_counts"].update(completed=ok, failed=len(batch["_results"]) - ok)

    def _close(self, batch: dict, status: str, missing_code: str | None, missing_message: str | None) -> None:
        now = int(time.time())
        results = list(batch["_results"])
        if missing_code:
            for line in batch["_lines"][len(results):]:
                results.append({"id": f"batch_req_{next(self._ids):06d}", "custom_id": line["custom_id"],
                                "response": None, "error": {"code": missing_code, "message": missing_message}})
        out = [r for r in results if r["error"] is None]
        err = [r for r in results if r["error"] is not None]
        if self.batch.shuffle:
            import random

            random.Random(len(out)).shuffle(out)
        self._count(batch)
        batch["request_counts"]["failed"] = len(results) - batch["request_counts"]["completed"]
        for records, name in ((out, "output_file_id"), (err, "error_file_id")):
            if records:
                data = "".join(json.dumps(r) + "\n" for r in records).encode("utf-8")
                batch[name] = self._file(data, f"{batch['id']}_{name[:-8]}.jsonl", "batch_output")["id"]
        batch["status"] = status
        batch[f"{status}_at"] = now

    def app(self) -> web.Application:
        app = super().app()
        app.router.add_post("/v1/files", self.post_file)
        app.router.add_get("/v1/files/{id}", self.get_file)
        app.router.add_get("/v1/files/{id}/content", self.get_file_content)
        app.router.add_post("/v1/batches", self.post_batch)
        app.router.add_get("/v1/batches", self.list_batches)
        app.router.add_get("/v1/batches/{id}", self.get_batch)
        app.router.add_post("/v1/batches/{id}/cancel", self.cancel_batch)
        return app


def _public(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if not k.startswith("_")}


def _error(status: int, message: str, param: str | None = None) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "invalid_request_error", "param": param,
                                        "code": None}}, status=status)


def main(argv: list[str] | None = None) -> None:
    """`python tests/batch_server.py --port 0 [--instant]`: prints `listening on URL` and serves until its parent
    exits (benchmarks measure the client alone)."""
    import argparse

    from stub_server import serve_until_parent_exits

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--instant", action="store_true", help="complete each batch at its first retrieve")
    args = p.parse_args(argv)
    server = BatchServer(port=args.port)
    server.batch.instant = args.instant
    serve_until_parent_exits(server)


if __name__ == "__main__":
    main()
