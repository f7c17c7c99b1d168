"""The demo page a service serves at `{route}/demo` when its file says `demo: true`: the Ray AIR
chapter's Gradio step (`gr.Image` -> `gr.Label`) without Gradio, one self-contained HTML file (no
external asset: it works on a closed network) that calls the service's own `POST {route}/predict`.

    an image model   a file input; the browser decodes the PNG/JPEG and scales it to the model's
                     HxWx3 uint8 on a canvas; the top classes with their probabilities
    a table model    a form of the card's required columns with their kinds, prefilled from the
                     card's example row (the train split's first); the prediction and every
                     class's probability

Signing in (`auth: token`): a browser cannot be told to send a header, so the page takes a
cookie instead. It carries neither the API token nor the page's own secret, but a MAC of an
expiry: `EXPIRY.HMAC-SHA256(key, "EXPIRY|orchestrate-demo-page")`, good for `LIFETIME` (not
sliding: a cookie leaked once, from a shared screen, a proxy's log or a browser profile, lets
its finder in for 12 hours at most, then `orchestrate demo` signs in again). The page's secret
is made by `orchestrate serve` and kept 0600 beside the token; the key is its SHA-256, the only
part of it sent (`demo_sha256` in the user_config), so the replica can check a cookie and the
secret never leaves this machine (whoever reads the Serve config, a token holder, can make a
sign-in: the config is the key's only copy off this machine). `orchestrate demo` makes the
cookie when its one-time loopback link is opened. Browsers scope cookies by host, not port, so any listener on
127.0.0.1 whose path matches gets the cookie: it is HttpOnly, SameSite=Strict, a session
cookie, and its Path is the page's (`{route}/demo`), which the page's own predict
(`POST {route}/demo/predict`) is under. The app takes the cookie only there (the page, its
predict), never as the API's token, and its predict only with `HEADER`, which a page of
another origin cannot add without a CORS preflight this app never grants.
"""
from __future__ import annotations

import hashlib
import hmac
import html
import json
import re
import time
from typing import Any

COOKIE = "orchestrate-demo"
HEADER = "x-orchestrate-demo"
PAGE_PATH = "/demo"   # under the route; the page's predict: PAGE_PATH + "/predict"
VALUE = re.compile(r"([0-9]{1,12})\.([0-9a-f]{64})")   # EXPIRY.MAC
PURPOSE = "orchestrate-demo-page"
LIFETIME = 12 * 3600   # seconds a sign-in lasts, from the link's opening
# a cookie whose expiry lies further ahead than LIFETIME was not made by `cookie_header`; the
# margin is for a clock on the cluster behind this machine's
CLOCK_MARGIN = 3600
# the built-in image models' `image_size` when the experiment gives none (workload.models)
IMAGE_SIZES = {"vit": 224, "cnn": 32}
TOP_CLASSES = 5   # an image model's classes shown, best first (gr.Label's num_top_classes)


def cookie_path(route: str) -> str:
    """The cookie's Path: the page, and its predict under it."""
    return route.rstrip("/") + PAGE_PATH


# A route as the service schema allows it (route_prefix), never `/`: what goes into the cookie's
# Path comes from state that may be shared, so `;` or a line break must not reach the header.
ROUTE = re.compile(r"/[A-Za-z0-9._~/-]*[A-Za-z0-9._~-][A-Za-z0-9._~/-]*")


def mac_key(secret: str) -> str:
    """The cookie's MAC key as the replica holds it (`demo_sha256`): the secret's SHA-256."""
    return hashlib.sha256(secret.encode()).hexdigest()


def _mac(key: str, expiry: int) -> str:
    return hmac.new(bytes.fromhex(key), f"{expiry}|{PURPOSE}".encode(),
                    hashlib.sha256).hexdigest()


def cookie_value(secret: str, now: float | None = None) -> str:
    """`EXPIRY.MAC`: a sign-in to the page of `secret` until `LIFETIME` after `now`."""
    expiry = int(time.time() if now is None else now) + LIFETIME
    return f"{expiry}.{_mac(mac_key(secret), expiry)}"


def cookie_header(secret: str, route: str, now: float | None = None) -> str:
    """The `Set-Cookie` value signing a browser in to the page of `secret` for `LIFETIME`, for
    the route's page only (ValueError for a route the service schema does not allow, or
    `/`)."""
    if not ROUTE.fullmatch(route):
        raise ValueError(f"{route!r} is not a service's route prefix")
    return (f"{COOKIE}={cookie_value(secret, now)}; Path={cookie_path(route)}; HttpOnly; "
            f"SameSite=Strict")


def cookie_values(header: str | None) -> list[str]:
    """Every value a `Cookie` header carries under `COOKIE` (a browser sends one per path that
    matches); malformed ones are left out."""
    found = []
    for part in (header or "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and VALUE.fullmatch(value):
            found.append(value)
    return found


def signed_in(value: str, key: str, now: float | None = None) -> str | None:
    """None when `value` is a sign-in made with `key` that has not expired; else why not:
    "expired" or "wrong" (forged, of another secret, malformed, or not made here)."""
    found = VALUE.fullmatch(value)
    if found is None:
        return "wrong"
    expiry, mac = int(found[1]), found[2]
    if not hmac.compare_digest(mac, _mac(key, expiry)):
        return "wrong"
    now = time.time() if now is None else now
    if expiry > now + LIFETIME + CLOCK_MARGIN:
        return "wrong"
    return None if now < expiry else "expired"


def image_size(card: dict[str, Any]) -> int:
    model = card.get("model") or {}
    size = (model.get("args") or {}).get("image_size") or IMAGE_SIZES.get(str(model.get("name")), 224)
    return int(size)


def settings(card: dict[str, Any], checkpoint: str, service: str) -> dict[str, Any]:
    """What the page's script needs from the card."""
    columns = [{"name": c, "kind": (card.get("column_kinds") or {}).get(c, "number"),
                "example": (card.get("example") or {}).get(c)}
               for c in card.get("required_columns") or []]
    return {"service": service, "experiment": card.get("experiment"),
            "model": (card.get("model") or {}).get("name") or card.get("trainer"),
            "trainer": card.get("trainer"), "task": card.get("task"),
            "checkpoint": checkpoint.rstrip("/").rsplit("/", 1)[-1],
            "image": bool(card.get("image")),
            "image_size": image_size(card) if card.get("image") else None,
            "columns": [] if card.get("image") else columns,
            "classes": card.get("class_names"), "top": TOP_CLASSES, "header": HEADER}


def security_headers(nonce: str | None = None) -> dict[str, str]:
    scripts = f"'nonce-{nonce}'" if nonce else "'none'"
    return {"Content-Security-Policy": f"default-src 'none'; script-src {scripts}; "
                                       f"style-src 'unsafe-inline'; img-src blob:; "
                                       f"connect-src 'self'; form-action 'none'; "
                                       f"base-uri 'none'; frame-ancestors 'none'",
            "Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
            "X-Content-Type-Options": "nosniff"}


def page(card: dict[str, Any], checkpoint: str, service: str, nonce: str) -> str:
    shown = settings(card, checkpoint, service)
    data = json.dumps(shown, sort_keys=True).replace("<", "\\u003c")   # no </script> inside
    what = "an image" if shown["image"] else "a row"
    title = html.escape(f"{service}: try the model")
    model = shown["trainer"] if shown["model"] == shown["trainer"] else \
        f"{shown['model']} ({shown['trainer']})"
    subtitle = html.escape(f"{shown['experiment']} · {model} · checkpoint {shown['checkpoint']}")
    values = {"title": title, "subtitle": subtitle, "what": what, "nonce": nonce,
              "settings": data}
    return re.sub(r"\{(title|subtitle|what|nonce|settings)\}", lambda m: values[m[1]], PAGE)


def signed_out(service: str, reason: str) -> str:
    name = html.escape(service)
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>{name}: sign in</title><style>{STYLE}</style></head><body><main class="narrow">
<h1>{name}: sign in to try the model</h1><p>{html.escape(reason)}</p>
<p>This page is for whoever holds the service's token. On the machine that served it, run</p>
<pre>orchestrate demo {name}</pre>
<p>It opens this page in your browser through a one-time sign-in link (no secret is ever put
in a URL); with <code>--no-browser</code> it prints the link to open yourself.</p>
</main></body></html>
"""


STYLE = """
:root { --ink:#1f2933; --muted:#616e7c; --line:#d9e2ec; --accent:#d9480f; --bar:#ffd8a8;
        --back:#f5f7fa; font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
body { margin:0; background:var(--back); color:var(--ink); }
main { max-width:1100px; margin:0 auto; padding:28px 24px; }
main.narrow { max-width:640px; }
h1 { font-size:1.5rem; margin:0 0 4px; }
h2 { font-size:.8rem; text-transform:uppercase; letter-spacing:.06em; color:var(--muted);
     margin:0 0 14px; }
.sub { color:var(--muted); margin:0 0 22px; font-size:.92rem; }
.grid { display:grid; grid-template-columns: minmax(0,1.25fr) minmax(0,1fr); gap:22px;
        align-items:start; }
.panel { background:#fff; border:1px solid var(--line); border-radius:10px; padding:20px; }
.fields { display:grid; grid-template-columns: repeat(auto-fill, minmax(190px,1fr));
          gap:10px 14px; max-height:560px; overflow:auto; padding-right:4px; }
label { display:flex; flex-direction:column; font-size:.8rem; gap:3px; }
label span.kind { color:var(--muted); font-size:.7rem; }
input, select { font:inherit; font-size:.9rem; padding:5px 7px; border:1px solid var(--line);
                border-radius:6px; background:#fff; min-width:0; }
button { font:inherit; font-weight:600; background:var(--accent); color:#fff; border:0;
         border-radius:7px; padding:9px 18px; margin-top:16px; cursor:pointer; }
button.plain { background:#fff; color:var(--ink); border:1px solid var(--line); margin-left:8px; }
#prediction { font-size:2rem; font-weight:700; margin:0 0 16px; min-height:2.4rem; }
.row { display:grid; grid-template-columns: 90px 1fr 62px; gap:10px; align-items:center;
       margin:7px 0; font-size:.9rem; }
.track { background:var(--back); border-radius:5px; height:22px; overflow:hidden; }
.fill { background:var(--bar); height:100%; }
.row.top .fill { background:var(--accent); }
.row.top { font-weight:700; }
.pct { text-align:right; font-variant-numeric: tabular-nums; }
.note { color:var(--muted); font-size:.8rem; margin-top:14px; }
.error { color:#c92a2a; font-weight:600; }
#preview:not([src]) { display:none; }
#preview { display:block; width:224px; height:224px; object-fit:contain; margin:14px auto 0;
           image-rendering:pixelated; background:var(--back); border-radius:8px;
           border:1px solid var(--line); }
.drop { border:2px dashed var(--line); border-radius:10px; padding:18px; text-align:center; }
pre, code { background:var(--back); padding:2px 6px; border-radius:4px; }
pre { padding:10px; }
"""

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>""" + STYLE + """</style></head>
<body><main>
<h1>{title}</h1>
<p class="sub">{subtitle}</p>
<div class="grid">
  <section class="panel"><h2>Input: {what}</h2><form id="input"></form></section>
  <section class="panel"><h2>Prediction</h2>
    <div id="prediction" data-state="empty">–</div>
    <div id="classes"></div>
    <p class="note" id="status">Submit {what} to see what the model answers.</p>
  </section>
</div>
</main>
<script type="application/json" id="settings">{settings}</script>
<script nonce="{nonce}">
"use strict";
const S = JSON.parse(document.getElementById("settings").textContent);
const form = document.getElementById("input");
const status = document.getElementById("status");
const shown = document.getElementById("prediction");
const classes = document.getElementById("classes");

function el(tag, props, children) {
  const node = document.createElement(tag);
  Object.assign(node, props || {});
  for (const child of children || []) node.append(child);
  return node;
}

function field(column) {
  const id = "field-" + column.name;
  let input;
  if (column.kind === "boolean") {
    input = el("select", {id: id, name: column.name},
               [el("option", {value: "true", textContent: "true"}),
                el("option", {value: "false", textContent: "false"})]);
    input.value = String(column.example === null ? true : column.example);
  } else {
    const number = column.kind === "integer" || column.kind === "number";
    input = el("input", {id: id, name: column.name, type: number ? "number" : "text",
                         step: column.kind === "integer" ? "1" : "any"});
    input.value = column.example === null || column.example === undefined
      ? "" : String(column.example);
  }
  input.dataset.kind = column.kind;
  return el("label", {htmlFor: id}, [el("span", {textContent: column.name}),
                                     el("span", {className: "kind", textContent: column.kind}),
                                     input]);
}

function valueOf(input) {
  const text = input.value.trim();
  if (text === "") return null;
  if (input.dataset.kind === "boolean") return text === "true";
  if (input.dataset.kind === "integer" || input.dataset.kind === "number") return Number(text);
  return text;
}

function show(answer) {
  shown.textContent = (S.image ? "class " : "") + String(answer.prediction);
  shown.dataset.state = "shown";
  shown.dataset.value = JSON.stringify(answer.prediction);
  classes.replaceChildren();
  const scored = (S.classes || []).filter(c => ("probability_" + c) in answer)
    .map(c => ({name: c, p: answer["probability_" + c]}))
    .sort((a, b) => b.p - a.p);
  const top = S.image ? scored.slice(0, S.top) : scored;
  top.forEach((c, i) => {
    const row = el("div", {className: "row class-row" + (i === 0 ? " top" : "")}, [
      el("span", {textContent: (S.image ? "class " : "") + c.name}),
      el("div", {className: "track"}, [el("div", {className: "fill"})]),
      el("span", {className: "pct", textContent: (100 * c.p).toFixed(1) + "%"})]);
    row.querySelector(".fill").style.width = (100 * c.p).toFixed(2) + "%";
    row.dataset.class = JSON.stringify(c.name);
    row.dataset.probability = String(c.p);
    classes.append(row);
  });
}

async function predict(row, what) {
  status.className = "note";
  status.textContent = "asking the model…";
  let response;
  try {
    // the page's own predict, under the page's path (its cookie goes nowhere else)
    response = await fetch(location.pathname.replace(/[/]+$/, "") + "/predict", {
      method: "POST", credentials: "same-origin",
      headers: {"Content-Type": "application/json", [S.header]: "1"},
      body: JSON.stringify([row])});
  } catch (error) {
    status.className = "note error";
    status.textContent = "the service did not answer: " + error;
    return;
  }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    status.className = "note error";
    status.textContent = response.status === 401
      ? "signed out: run `orchestrate demo " + S.service + "` again"
      : "HTTP " + response.status + ": " + (body.error || body.detail || "");
    return;
  }
  show(body.predictions[0]);
  status.textContent = what + " · POST demo/predict, the API's predict";
  status.dataset.done = String(Number(status.dataset.done || 0) + 1);
}

function tableForm() {
  const fields = el("div", {className: "fields"}, S.columns.map(field));
  const reset = el("button", {type: "button", className: "plain",
                              textContent: "Example row"});
  reset.addEventListener("click", () => {
    fields.replaceChildren(...S.columns.map(field));
  });
  form.append(fields, el("button", {type: "submit", id: "submit", textContent: "Predict"}),
              reset);
  form.addEventListener("submit", event => {
    event.preventDefault();
    const row = Object.create(null);   // a column named __proto__ is a column too
    for (const input of fields.querySelectorAll("input, select")) row[input.name] = valueOf(input);
    predict(row, "the row above");
  });
}

function imageForm() {
  const size = S.image_size;
  const input = el("input", {type: "file", id: "image", accept: "image/png,image/jpeg"});
  const preview = el("img", {id: "preview", alt: ""});
  form.append(el("div", {className: "drop"}, [input,
    el("p", {className: "note", textContent: "PNG or JPEG; your browser scales it to " + size +
      "×" + size + " RGB, the model's input"})]), preview);
  input.addEventListener("change", async () => {
    const file = input.files[0];
    if (!file) return;
    preview.src = URL.createObjectURL(file);
    let bitmap;
    try {
      bitmap = await createImageBitmap(file, {colorSpaceConversion: "none",
                                              premultiplyAlpha: "none"});
    } catch (error) {
      status.className = "note error";
      status.textContent = "not an image this browser can read: " + error;
      return;
    }
    const canvas = el("canvas", {width: size, height: size});
    const context = canvas.getContext("2d", {willReadFrequently: true});
    context.fillStyle = "#fff";                 // a transparent pixel counts as white
    context.fillRect(0, 0, size, size);
    context.imageSmoothingQuality = "high";
    context.drawImage(bitmap, 0, 0, size, size);
    const pixels = context.getImageData(0, 0, size, size).data;
    const image = [];
    for (let y = 0; y < size; y++) {
      const line = [];
      for (let x = 0; x < size; x++) {
        const i = 4 * (y * size + x);
        line.push([pixels[i], pixels[i + 1], pixels[i + 2]]);
      }
      image.push(line);
    }
    predict({image: image}, file.name + " (" + bitmap.width + "×" + bitmap.height + ")");
  });
}

if (S.image) imageForm(); else tableForm();
</script>
</body></html>
"""
