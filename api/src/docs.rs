//! The API reference page served at `/v1/docs`: one self-contained HTML file.
//!
//! It fetches `/v1/openapi.json` (with the key typed into the page, kept in `sessionStorage`,
//! since the document needs a viewer key like every route) and renders each operation: method,
//! path, description, parameters, request body and responses, with `$ref`s expanded. Nothing
//! is loaded from elsewhere: no CDN, no fonts, so it works on an air-gapped host. Swagger UI's
//! vendored crate downloads its assets at build time, which this build may not do; a page of
//! a hundred lines is enough to read a spec.

/// The page.
pub const PAGE: &str = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>punctual API</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:70rem;padding:1rem 2rem;color:#1b1f24}
h1{margin:.2rem 0}h2{border-bottom:1px solid #d0d7de;padding-bottom:.2rem;margin-top:2rem;text-transform:capitalize}
details{border:1px solid #d0d7de;border-radius:6px;margin:.5rem 0;padding:.4rem .8rem}
summary{cursor:pointer;font-family:ui-monospace,monospace}
.m{display:inline-block;min-width:4.2rem;font-weight:700}.get{color:#0969da}.post{color:#1a7f37}
pre{background:#f6f8fa;padding:.6rem;overflow:auto;font-size:13px;border-radius:4px}
table{border-collapse:collapse}td,th{border:1px solid #d0d7de;padding:.2rem .5rem;text-align:left;vertical-align:top}
#err{color:#cf222e}input{font:inherit;width:28rem}
</style></head><body>
<h1>punctual API</h1>
<p>Every route but <code>/healthz</code> needs <code>Authorization: Bearer &lt;key&gt;</code>.
Key (kept in this tab only): <input id="key" type="password" autocomplete="off">
<button id="load">Load</button> <span id="err"></span></p>
<div id="out"></div>
<script>
"use strict";
const el=(t,a={},...k)=>{const e=document.createElement(t);Object.assign(e,a);for(const c of k)e.append(c);return e;};
let spec=null;
function deref(s,depth){if(!s||depth>6)return s;if(s.$ref){const n=s.$ref.split("/").pop();return deref(spec.components.schemas[n],depth+1);}
 if(Array.isArray(s))return s.map(x=>deref(x,depth+1));if(typeof s!=="object")return s;const o={};for(const[k,v]of Object.entries(s))o[k]=deref(v,depth+1);return o;}
const json=s=>el("pre",{textContent:JSON.stringify(deref(s,0),null,2)});
function op(path,method,o){
 const d=el("details",{},el("summary",{},el("span",{className:"m "+method,textContent:method.toUpperCase()}),path+"  ",el("span",{textContent:o.summary||""})));
 if(o.description)d.append(el("p",{textContent:o.description}));
 if(o.parameters&&o.parameters.length){const t=el("table",{},el("tr",{},el("th",{textContent:"parameter"}),el("th",{textContent:"in"}),el("th",{textContent:"description"})));
  for(const p of o.parameters)t.append(el("tr",{},el("td",{textContent:p.name+(p.required?" *":"")}),el("td",{textContent:p.in}),el("td",{textContent:p.description||""})));d.append(t);}
 if(o.requestBody){for(const[ct,c]of Object.entries(o.requestBody.content||{})){d.append(el("h4",{textContent:"Request body ("+ct+")"}),json(c.schema));}}
 for(const[code,r]of Object.entries(o.responses||{})){d.append(el("h4",{textContent:code+" "+(r.description||"")}));
  for(const[ct,c]of Object.entries(r.content||{}))if(c.schema)d.append(el("div",{textContent:ct}),json(c.schema));}
 return d;}
function render(){const out=document.getElementById("out");out.replaceChildren(el("p",{textContent:(spec.info.title||"")+" "+(spec.info.version||"")+" — OpenAPI "+spec.openapi}));
 const byTag={};for(const[path,item]of Object.entries(spec.paths))for(const[m,o]of Object.entries(item)){if(typeof o!=="object"||!o.responses)continue;const t=(o.tags||["other"])[0];(byTag[t]=byTag[t]||[]).push([path,m,o]);}
 for(const[t,ops]of Object.entries(byTag)){out.append(el("h2",{textContent:t}));for(const[p,m,o]of ops)out.append(op(p,m,o));}
 out.append(el("h2",{textContent:"schemas"}));for(const[n,s]of Object.entries(spec.components.schemas||{}))out.append(el("details",{},el("summary",{textContent:n}),json(s)));}
async function load(){const key=document.getElementById("key").value.trim();sessionStorage.setItem("punctual-key",key);const err=document.getElementById("err");err.textContent="";
 try{const r=await fetch("openapi.json",{headers:key?{Authorization:"Bearer "+key}:{}});const b=await r.json();if(!r.ok){err.textContent=(b.title||r.status)+": "+(b.detail||"");return;}spec=b;render();}
 catch(e){err.textContent=String(e);}}
document.getElementById("key").value=sessionStorage.getItem("punctual-key")||"";
document.getElementById("load").onclick=load;if(document.getElementById("key").value)load();
</script></body></html>
"#;
