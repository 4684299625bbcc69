"""The OpenAI Batch API endpoints the loopback server needs: upload a JSONL file
(`POST /files`, multipart), create a batch on it (`POST /batches`), read it back
(`GET /batches/{id}`), cancel it, and read its output and error files
(`GET /files/{id}/content`).

A batch is `validating` then `in_progress` until `delay` seconds after it was created,
then `completed` (or `expired`, or `failed`, when `end_as` says so). Each line is
answered like a chat-completions call (the server's `batch_answer`: refused with the
same 400 body a direct call gets, as a line of the error file, as OpenAI's Batch API
reports a refused line), unless `line_faults` maps its
line number (0-based, in upload order) in the first batch created to "error" (a line in the error
file), "500" (an output line whose response failed) or "missing" (no line at all).
A hostile server: `id_for` names each new batch (an absolute path, `../../x`)."""

from __future__ import annotations

import email.parser
import email.policy
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ENDED = ("completed", "expired", "failed", "cancelled")


@dataclass
class FakeBatch:
    id: str
    input_file_id: str
    created: float
    status: str = "validating"
    output_file_id: str | None = None
    error_file_id: str | None = None
    total: int = 0


@dataclass
class BatchStore:
    delay: float = 0.2
    end_as: str = "completed"  # or "expired", "failed", "cancelled"
    line_faults: dict[int, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    batches: dict[str, FakeBatch] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)  # batch ids, in creation order
    retrieved: int = 0
    id_for: Callable[[int], str] | None = None  # the id of the n-th batch created, instead of batch_<n>
    lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def upload(self, content_type: str, body: bytes) -> dict[str, Any]:
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + body)
        data = b""
        for part in message.iter_parts():
            if part.get_param("name", header="content-disposition") == "file":
                payload = part.get_payload(decode=True)
                data = payload if isinstance(payload, bytes) else b""
        with self.lock:
            file_id = f"file-{next(self._ids)}"
            self.files[file_id] = data
        return {"id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                "filename": "batch.jsonl", "purpose": "batch", "status": "processed"}

    def create(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            if body.get("input_file_id") not in self.files or body.get("endpoint") != "/v1/chat/completions":
                return 400, {"error": {"message": "bad batch request", "type": "invalid_request_error"}}
            number = next(self._ids)
            name = self.id_for(len(self.created)) if self.id_for is not None else f"batch_{number}"
            batch = FakeBatch(name, body["input_file_id"], time.monotonic())
            batch.total = len(self.files[batch.input_file_id].splitlines())
            self.batches[batch.id] = batch
            self.created.append(batch.id)
            return 200, self._view(batch)

    def retrieve(self, batch_id: str,
                 answer: Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]) -> dict[str, Any] | None:
        with self.lock:
            self.retrieved += 1
            batch = self.batches.get(batch_id)
            if batch is None:
                return None
            self._advance(batch, answer)
            return self._view(batch)

    def cancel(self, batch_id: str) -> dict[str, Any] | None:
        with self.lock:
            batch = self.batches.get(batch_id)
            if batch is None:
                return None
            if batch.status not in ENDED:
                batch.status = "cancelled"
            return self._view(batch)

    def content(self, file_id: str) -> bytes | None:
        with self.lock:
            return self.files.get(file_id)

    def _advance(self, batch: FakeBatch, answer: Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]) -> None:
        if batch.status in ENDED:
            return
        if time.monotonic() - batch.created < self.delay:
            batch.status = "in_progress" if batch.status == "validating" else batch.status
            return
        batch.status = self.end_as
        if self.end_as in ("failed", "cancelled"):
            return
        lines = [json.loads(line) for line in self.files[batch.input_file_id].splitlines() if line.strip()]
        if self.end_as == "expired":
            lines = lines[: len(lines) // 2]  # an expired batch still returns what it finished
        output, errors = [], []
        for index, line in enumerate(lines):
            fault = self.line_faults.get(index) if batch.id == self.created[0] else None
            custom_id = line["custom_id"]
            if fault == "missing":
                continue
            if fault == "error":
                errors.append({"id": f"req-{index}", "custom_id": custom_id, "response": None,
                               "error": {"code": "server_error", "message": "line failed upstream"}})
            elif fault == "500":
                output.append({"id": f"req-{index}", "custom_id": custom_id, "error": None, "response": {
                    "status_code": 500, "request_id": f"r{index}",
                    "body": {"error": {"message": "upstream exploded", "type": "server_error"}}}})
            else:
                status, body = answer(line["body"])
                (output if status == 200 else errors).append({
                    "id": f"req-{index}", "custom_id": custom_id, "error": None,
                    "response": {"status_code": status, "request_id": f"r{index}", "body": body}})
        batch.output_file_id = self._store(output)
        batch.error_file_id = self._store(errors) if errors else None

    def _store(self, lines: list[dict[str, Any]]) -> str:
        file_id = f"file-{next(self._ids)}"
        self.files[file_id] = "".join(json.dumps(line) + "\n" for line in lines).encode()
        return file_id

    def _view(self, batch: FakeBatch) -> dict[str, Any]:
        done = batch.status == "completed"
        return {"id": batch.id, "object": "batch", "endpoint": "/v1/chat/completions", "errors": None,
                "input_file_id": batch.input_file_id, "completion_window": "24h", "status": batch.status,
                "output_file_id": batch.output_file_id, "error_file_id": batch.error_file_id,
                "created_at": int(time.time()),
                "request_counts": {"total": batch.total, "completed": batch.total if done else 0, "failed": 0}}
