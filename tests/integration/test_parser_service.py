"""The parser as a service: killable worker processes, reasons over gRPC, OCR, and ingestion through the stack."""

from __future__ import annotations

import email.message
import io
import multiprocessing
import os

import grpc
import pytest
from docx import Document

from services.parser import errors
from services.parser.formats import ReadOptions
from services.parser.isolation import LOADER_OUT_OF_MEMORY, ParseWorkers, _Worker
from services.parser.main import build
from shared.clients import ParserClient
from shared.config import Settings
from shared import tenancy
from shared.contracts import chunk_pb2, parser_pb2, parser_pb2_grpc
from shared.errors import DeadlineExceeded, InvalidArgument
from tests.conftest import shared_data

pytestmark = pytest.mark.integration

HOSTILE_REASONS = {
    "copy-protected.pdf": errors.COPY_PROTECTED,
    "empty.txt": errors.EMPTY,
    "fake-text-all-whitespace.txt": errors.WHITESPACE_ONLY,
    "loremipsum-flat.pdf": errors.IMAGE_ONLY,
    "password.pdf": errors.PASSWORD_PROTECTED,
    "password_protected.xlsx": errors.PASSWORD_PROTECTED,
}


@pytest.fixture(scope="module")
def parser_server():
    server = build(Settings(), port=0)
    server.start()
    server.mark_serving()
    yield server
    server.stop(0)


@pytest.fixture(scope="module")
def parser_client(parser_server):
    client = ParserClient(parser_server.address, timeout_s=120)
    yield client
    client.close()


# the tenant context every inner call carries: here the worker's, parsing a job of namespace ns
WORKER = tenancy.operator_tenant("worker", namespaces=["ns"])


@pytest.fixture(autouse=True)
def _as_the_worker():
    with tenancy.acting_for(WORKER):
        yield


def _request(name: str, data: bytes, **options) -> parser_pb2.ParseRequest:
    return parser_pb2.ParseRequest(kb="kb", namespace="ns", filename=name, content=data,
                                   tokenizer_model="all-MiniLM-L6-v2", options=parser_pb2.ParseOptions(**options),
                                   context=chunk_pb2.CallContext(tenant=WORKER))


def test_a_refused_file_carries_its_reason_in_trailing_metadata_and_text(parser_server):
    data = shared_data("docs", "hostile", "password.pdf").read_bytes()
    with grpc.insecure_channel(parser_server.address) as channel:
        stub = parser_pb2_grpc.ParserServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.Parse(_request("password.pdf", data), timeout=60)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(caught.value.trailing_metadata())[errors.REASON_KEY] == errors.PASSWORD_PROTECTED
    assert caught.value.details().startswith("password_protected: 'password.pdf' is password-protected")


def test_client_gets_the_projects_error_with_the_reason(parser_client):
    data = shared_data("docs", "hostile", "loremipsum-flat.pdf").read_bytes()
    with pytest.raises(InvalidArgument) as caught:
        parser_client.parse(_request("scan.pdf", data))
    assert errors.reason_of(caught.value) == errors.IMAGE_ONLY


def test_ocr_reads_a_scanned_pdf_when_the_kb_enables_it(parser_client):
    data = shared_data("docs", "hostile", "loremipsum-flat.pdf").read_bytes()
    response = parser_client.parse(_request("scan.pdf", data, ocr=True))
    text = " ".join(c.raw_content for c in response.chunks)
    assert "Lorem ipsum dolor sit amet" in text
    assert response.page_count == 1 and all(c.source.page == 1 for c in response.chunks)


def test_a_parse_past_its_timeout_is_stopped_and_the_pool_keeps_working():
    workers = ParseWorkers(1)
    try:
        data = shared_data("docs", "hostile", "failure-after-repair.pdf").read_bytes()
        # a fresh worker first imports unstructured, then reads 76 pages: far beyond 10 ms
        with pytest.raises(DeadlineExceeded, match="parse_timeout: 'big.pdf' took longer than 0.01 s"):
            workers.read("big.pdf", data, ReadOptions(), 0.01)
        document = workers.read("note.md", b"# Note\n\nStill serving.", ReadOptions(), 120)
        assert [b.text for b in document.blocks] == ["Note", "Still serving."]
        # errors raised in the worker come back with their class and reason
        with pytest.raises(errors.ParseError) as caught:
            workers.read("blank.txt", b" \n\t", ReadOptions(), 120)
        assert caught.value.reason == errors.WHITESPACE_ONLY
    finally:
        workers.close()


def _die_as_the_loader_does_out_of_memory(connection) -> None:
    connection.recv()
    os._exit(LOADER_OUT_OF_MEMORY)


def test_a_worker_the_loader_ends_for_lack_of_memory_is_reported_over_its_memory_limit():
    """At its address-space cap a worker can die in glibc's loader (a library's thread-local data allocated on
    first use, exit 127) instead of raising MemoryError: that file needed more memory than its budget."""
    workers = ParseWorkers(1)
    try:
        dying = object.__new__(_Worker)
        dying.connection, child = multiprocessing.get_context("fork").Pipe()
        dying.process = multiprocessing.get_context("fork").Process(target=_die_as_the_loader_does_out_of_memory,
                                                                    args=(child,), daemon=True)
        dying.process.start()
        child.close()
        workers._all.add(dying)
        workers._idle.put(dying)
        with pytest.raises(errors.ParseError) as caught:
            workers.read("big.html", b"<p>big</p>", ReadOptions(max_memory_mb=64), 60)
        assert caught.value.reason == errors.MEMORY_LIMIT and "more than 64 MB" in caught.value.message
        assert dying not in workers._all  # discarded; the next read gets a fresh worker
        document = workers.read("note.md", b"# Note\n\nStill serving.", ReadOptions(), 120)
        assert [b.text for b in document.blocks] == ["Note", "Still serving."]
    finally:
        workers.close()


def test_start_spawns_every_worker_with_its_libraries_loaded_before_the_first_file():
    workers = ParseWorkers(2)
    try:
        workers.start()
        pids = sorted(workers.worker_pids())
        assert len(pids) == 2
        for pid in pids:  # spaCy's compiled modules are mapped: the imports happened before any file
            with open(f"/proc/{pid}/maps") as maps:
                assert "spacy" in maps.read()
        document = workers.read("note.txt", b"Ready to read.", ReadOptions(), 120)
        assert [b.text for b in document.blocks] == ["Ready to read."]
        workers.start()  # the pool is full: nothing more is spawned
        assert sorted(workers.worker_pids()) == pids
    finally:
        workers.close()
    workers.start()  # a closed pool stays closed
    assert workers.worker_pids() == []


def _eml_with_attachments() -> bytes:
    message = email.message.EmailMessage()
    message["From"] = "ops@example.com"
    message["To"] = "team@example.com"
    message["Subject"] = "Dock maintenance"
    message.set_content("The charging dock is serviced every quarter.\n\nSee the attached checklist.")
    message.add_attachment("# Checklist\n\nClean the charging contacts with a dry cloth.".encode(),
                           maintype="text", subtype="markdown", filename="checklist.md")
    document = Document()
    document.add_heading("保养记录", level=1)
    document.add_paragraph("充电桩每季度保养一次。")
    buffer = io.BytesIO()
    document.save(buffer)
    message.add_attachment(buffer.getvalue(), maintype="application",
                           subtype="vnd.openxmlformats-officedocument.wordprocessingml.document", filename="记录.docx")
    message.add_attachment(b"MZ\x90\x00", maintype="application", subtype="octet-stream", filename="tool.exe")
    return message.as_bytes()


def test_eml_attachments_come_back_as_their_own_documents(parser_client):
    response = parser_client.parse(parser_pb2.ParseRequest(kb="kb", namespace="ns", filename="mail/dock.eml",
                                                           content=_eml_with_attachments()))
    assert response.doc_id == "mail/dock.eml"
    assert list(response.chunks[0].heading_path) == ["Dock maintenance"]
    assert response.chunks[0].metadata["email_from"] == "ops@example.com"
    by_name = {a.filename: a for a in response.attachments}
    assert set(by_name) == {"checklist.md", "记录.docx"}
    assert by_name["checklist.md"].doc_id == "mail/dock.eml/checklist.md"
    assert list(by_name["checklist.md"].chunks[0].heading_path) == ["Checklist"]
    assert list(by_name["记录.docx"].chunks[0].heading_path) == ["保养记录"]
    assert all(c.doc_id == "mail/dock.eml/记录.docx" for c in by_name["记录.docx"].chunks)
    assert any("tool.exe" in w and "unsupported_type" in w for w in response.warnings)


def test_a_batch_mixing_hostile_and_good_files_ingests_every_good_one(client):
    client.create_kb("mixed")
    good = ["docx-tables.docx", "fake-power-point-table.pptx", "list-item-example.pdf", "fake-html-cp1252.html"]
    uploads = [(name, shared_data("docs", "hostile", name).read_bytes()) for name in HOSTILE_REASONS]
    uploads += [(name, shared_data("docs", "en", name).read_bytes()) for name in good]
    uploads.append(("mail/dock.eml", _eml_with_attachments()))
    jobs = {client.upload("mixed", name, data)["job_id"]: name for name, data in uploads}
    finals = {jobs[job["job_id"]]: job for job in client.wait(list(jobs), timeout_s=600)}
    for name, reason in HOSTILE_REASONS.items():
        assert finals[name]["state"] == "failed", name
        assert errors.reason_of(finals[name]["error"]) == reason, finals[name]["error"]
    for name in [*good, "mail/dock.eml"]:
        assert finals[name]["state"] == "done", (name, finals[name].get("error"))
    documents = {d["doc_id"] for d in client.list_documents("mixed")}
    assert documents == {*good, "mail/dock.eml", "mail/dock.eml/checklist.md", "mail/dock.eml/记录.docx"}
    answer = client.query("mixed", "How often is the charging dock serviced?")
    assert answer["chunks"]


def test_per_file_chunker_rules_reach_the_parser_through_ingestion(client):
    client.create_kb("ruled", config_yaml="name: ruled\nchunker_rules:\n  - glob: 'contracts/*'\n    name: fixed\n")
    uploads = {"contracts/lease.md": "# Lease\n\n## Term\n\nThe lease of the charging bay runs for twelve months.",
               "manuals/dock.md": "# Dock\n\n## Cleaning\n\nWipe the dock contacts with a dry cloth every week."}
    jobs = [client.upload("ruled", name, text.encode())["job_id"] for name, text in uploads.items()]
    assert [job["state"] for job in client.wait(jobs)] == ["done", "done"]

    def top_chunk(question: str) -> dict:
        return client.query("ruled", question)["chunks"][0]["chunk"]

    lease = top_chunk("How long does the charging bay lease run?")
    assert lease["doc_id"] == "contracts/lease.md" and lease["block_type"] == "BLOCK_TYPE_PARAGRAPH"
    assert not lease.get("heading_path"), lease  # fixed windows carry no structure
    dock = top_chunk("How often are the dock contacts wiped?")
    assert dock["doc_id"] == "manuals/dock.md" and dock["heading_path"] == ["Dock", "Cleaning"]
