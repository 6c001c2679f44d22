/* The API docs page (portal/api/docs.html): reads /api/schema/ and lets you try each call. */
"use strict";
const $ = (tag, attrs = {}, ...children) => {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  for (const c of children) el.append(c);
  return el;
};
const tokenInput = document.getElementById("token");
tokenInput.value = sessionStorage.getItem("berth-token") || "";
tokenInput.addEventListener("change", () => sessionStorage.setItem("berth-token", tokenInput.value.trim()));

function cookie(name) {
  const m = document.cookie.match(new RegExp("(?:^|; )" + name + "=([^;]*)"));
  return m ? decodeURIComponent(m[1]) : "";
}

function resolve(schema, spec) {
  if (schema && schema.$ref) return resolve(spec.components.schemas[schema.$ref.split("/").pop()], spec);
  return schema || {};
}

function example(schema, spec, depth = 0) {
  schema = resolve(schema, spec);
  if (depth > 4) return null;
  if (schema.allOf) return example(schema.allOf[0], spec, depth);
  if (schema.enum) return schema.enum[0];
  switch (schema.type) {
    case "object": {
      const out = {};
      for (const name of schema.required || []) out[name] = example(schema.properties[name], spec, depth + 1);
      return out;
    }
    case "array": return [example(schema.items, spec, depth + 1)];
    case "integer": return schema.minimum !== undefined ? schema.minimum : 1;
    case "number": return 0;
    case "boolean": return true;
    default: return "";
  }
}

async function send(op, form, out) {
  let path = op.path;
  const query = new URLSearchParams();
  const headers = { "Accept": "application/json" };
  for (const p of op.params) {
    const value = form.querySelector(`[name="p-${p.in}-${p.name}"]`).value;
    if (value === "") continue;
    if (p.in === "path") path = path.replace(`{${p.name}}`, encodeURIComponent(value));
    else if (p.in === "query") query.append(p.name, value);
    else if (p.in === "header") headers[p.name] = value;
  }
  const token = tokenInput.value.trim();
  if (token) headers["Authorization"] = "Bearer " + token;
  else headers["X-CSRFToken"] = cookie("csrftoken");
  const init = { method: op.method.toUpperCase(), headers, credentials: "same-origin" };
  const body = form.querySelector("textarea");
  if (body) { headers["Content-Type"] = "application/json"; init.body = body.value; }
  const url = path + (query.toString() ? "?" + query : "");
  out.textContent = `${init.method} ${url} …`;
  const response = await fetch(url, init);
  const text = await response.text();
  let shown = text;
  try { shown = JSON.stringify(JSON.parse(text), null, 2); } catch (e) { /* not JSON */ }
  const interesting = ["retry-after", "idempotent-replayed", "location", "www-authenticate"]
    .filter(h => response.headers.get(h)).map(h => `${h}: ${response.headers.get(h)}`).join("\n");
  out.textContent = `${response.status} ${response.statusText}\n${interesting}${interesting ? "\n" : ""}\n${shown}`;
}

function render(spec) {
  document.getElementById("title").textContent = `${spec.info.title} ${spec.info.version}`;
  document.getElementById("description").textContent = spec.info.description || "";
  const nav = document.getElementById("nav");
  nav.replaceChildren($("strong", {}, "Berth API"));
  const ops = document.getElementById("ops");
  for (const [path, methods] of Object.entries(spec.paths)) {
    for (const [method, detail] of Object.entries(methods)) {
      const id = detail.operationId;
      const op = { path, method, params: detail.parameters || [] };
      nav.append($("a", { href: "#" + id }, $("span", { class: "m " + method }, method.toUpperCase()), path));
      const form = $("form");
      for (const p of op.params) {
        form.append($("label", {}, $("span", {}, `${p.name} (${p.in})${p.required ? " *" : ""}`),
          $("input", { name: `p-${p.in}-${p.name}`, size: 40, title: p.description || "" })));
      }
      const content = detail.requestBody && detail.requestBody.content["application/json"];
      if (content) {
        const area = $("textarea");
        const given = content.examples ? Object.values(content.examples)[0].value : undefined;
        area.value = JSON.stringify(given !== undefined ? given : example(content.schema, spec), null, 2);
        form.append($("div", { class: "muted" }, "Request body (JSON):"), area);
      }
      const out = $("pre", {}, "");
      const button = $("button", { type: "submit" }, "Send");
      form.append(button);
      form.addEventListener("submit", e => { e.preventDefault(); send(op, form, out).catch(err => out.textContent = String(err)); });
      const statuses = Object.entries(detail.responses).map(([code, r]) => `${code}: ${r.description || ""}`).join("\n");
      ops.append($("section", { class: "op", id },
        $("h3", {}, $("span", { class: "m " + method }, method.toUpperCase()), " ", path),
        $("p", {}, detail.description || detail.summary || ""),
        form, out,
        $("details", {}, $("summary", {}, "Responses"), $("pre", {}, statuses))));
    }
  }
}

fetch("/api/schema/?format=json", { headers: { "Accept": "application/json" } })
  .then(r => r.json()).then(render)
  .catch(err => { document.getElementById("ops").textContent = "Could not load the schema: " + err; });
