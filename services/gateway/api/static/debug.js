// Test bench: runs a query through the REST API, then renders its stored trace.
"use strict";

const $ = (id) => document.getElementById(id);
const saved = sessionStorage.getItem("ragkb_api_key");
if (saved) $("api_key").value = saved;

function headers() {
  const key = $("api_key").value.trim();
  sessionStorage.setItem("ragkb_api_key", key);
  const h = { "Content-Type": "application/json" };
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

async function api(method, path, body) {
  const response = await fetch(path, { method, headers: headers(), body: body ? JSON.stringify(body) : undefined });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const e = data.error || {};
    throw new Error(`${response.status} ${e.type || ""}: ${e.message || response.statusText}` +
                    (e.stage ? ` (stage: ${e.stage})` : ""));
  }
  return data;
}

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text;
  if (cls) td.className = cls;
}

const num = (x) => (x === undefined || x === null ? "" : Number(x).toFixed(4));

function candidates(id, entries, columns) {
  const table = $(id);
  table.innerHTML = "";
  const head = table.createTHead().insertRow();
  for (const [title] of columns) {
    const th = document.createElement("th");
    th.textContent = title;
    head.appendChild(th);
  }
  const body = table.createTBody();
  if (!entries.length) {
    const row = body.insertRow();
    cell(row, "—", "muted");
    return;
  }
  for (const entry of entries) {
    const row = body.insertRow();
    for (const [, pick, cls] of columns) cell(row, pick(entry), cls);
  }
}

const RANKED = [
  ["#", (e) => e.rank, "num"],
  ["score", (e) => num(e.score), "num"],
  ["bm25 #", (e) => e.bm25_rank || "", "num"],
  ["dense #", (e) => e.dense_rank || "", "num"],
  ["doc", (e) => e.doc_id],
  ["heading", (e) => (e.heading_path || []).join(" > ")],
  ["text", (e) => e.text.slice(0, 140)],
];
const DROPPED = [
  ["chunk", (e) => e.chunk_id.slice(0, 12)],
  ["reason", (e) => e.reason],
  ["score", (e) => num(e.score), "num"],
  ["doc", (e) => e.doc_id || ""],
  ["text", (e) => (e.text || "").slice(0, 140)],
];

function render(result, trace) {
  const counts = trace.counts;
  $("counts").innerHTML = "";
  for (const [name, label] of [["bm25", "BM25"], ["dense", "向量 dense"], ["fused", "融合 fused"],
                               ["reranked", "重排 reranked"], ["dropped", "丢弃 dropped"]]) {
    const span = document.createElement("span");
    span.id = "count_" + name;
    span.textContent = `${label}: ${counts[name]}`;
    $("counts").appendChild(span);
  }
  $("queries").textContent = `原始问题 original: ${trace.original_query} · 实际查询 effective: ${trace.effective_query}` +
    (trace.extra_queries.length ? ` · 扩展 extra: ${trace.extra_queries.join(" | ")}` : "") +
    ` · 语言 language: ${trace.language} · namespaces: ${trace.request.namespaces.join(",")}`;
  const stages = $("stages").tBodies[0];
  stages.innerHTML = "";
  for (const stage of trace.stages) {
    const row = stages.insertRow();
    cell(row, stage.name);
    cell(row, stage.ms.toFixed(1), "num");
    cell(row, Object.entries(stage.metadata).map(([k, v]) => `${k}=${v}`).join("  "));
  }
  const steps = $("steps").tBodies[0];
  steps.innerHTML = "";
  for (const note of trace.step_notes) {
    const row = steps.insertRow();
    cell(row, note.step); cell(row, note.status); cell(row, note.ms ? note.ms.toFixed(1) : "", "num"); cell(row, note.detail);
  }
  candidates("bm25", trace.lists.bm25.slice(0, 10), RANKED);
  candidates("dense", trace.lists.dense.slice(0, 10), RANKED);
  candidates("fused", trace.lists.fused, RANKED);
  candidates("reranked", trace.lists.reranked, RANKED);
  candidates("dropped", trace.lists.dropped, DROPPED);
  candidates("context", trace.lists.reranked.map((e, i) => ({ ...e, n: i + 1 })), [
    ["[n]", (e) => `[${e.n}]`, "num"], ["doc", (e) => e.doc_id], ["text", (e) => e.text],
  ]);
  $("answer").textContent = result.answer || (result.refused ? "(refused)" : "(no answer: generation off)");
  candidates("citations", result.citations, [
    ["[n]", (c) => `[${c.number}]`, "num"], ["doc", (c) => c.doc_id], ["quote", (c) => c.quote],
  ]);
  $("trace_link").textContent = trace.trace_id;
  $("trace_link").href = `/v1/traces/${trace.trace_id}`;
  $("result").hidden = false;
}

async function run(event) {
  event.preventDefault();
  $("error").textContent = "";
  $("run").disabled = true;
  try {
    const namespaces = $("namespaces").value.split(",").map((s) => s.trim()).filter(Boolean);
    const kb = encodeURIComponent($("kb").value);
    const result = await api("POST", `/v1/knowledge-bases/${kb}/query`,
                             { query: $("query").value, namespaces, top_k: Number($("top_k").value) || 0 });
    const trace = await api("GET", `/v1/traces/${result.trace_id}`);
    render(result, trace);
  } catch (error) {
    $("error").textContent = String(error.message || error);
  } finally {
    $("run").disabled = false;
  }
}

async function loadKbs() {
  try {
    const data = await api("GET", "/v1/knowledge-bases");
    $("kb").innerHTML = "";
    for (const kb of data.knowledge_bases) {
      const option = document.createElement("option");
      option.value = option.textContent = kb.name;
      $("kb").appendChild(option);
    }
  } catch (error) {
    $("error").textContent = "知识库列表不可用 / cannot list knowledge bases: " + error.message;
  }
}

$("bench").addEventListener("submit", run);
$("api_key").addEventListener("change", loadKbs);
loadKbs();
