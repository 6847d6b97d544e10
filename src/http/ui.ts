// The --ui page: one self-contained HTML document (no external assets, so it works offline and
// under the server's own Origin guard). It talks to /v1/chat/completions with streaming.
export function chatPageHtml(model_id: string): string {
  const esc = model_id.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>MASHBOX Chat</title>
<style>
body{font:15px/1.45 system-ui,sans-serif;margin:0;display:flex;flex-direction:column;height:100vh;background:#f6f6f4}
header{padding:.6em 1em;background:#222;color:#eee}header small{opacity:.7;margin-left:.6em}
#log{flex:1;overflow:auto;padding:1em}.m{max-width:52em;margin:.4em auto;padding:.6em .9em;border-radius:8px;white-space:pre-wrap}
.user{background:#dfe9ff}.assistant{background:#fff;border:1px solid #ddd}.error{background:#fdd}
form{display:flex;gap:.5em;padding:.8em;max-width:54em;margin:0 auto;width:100%;box-sizing:border-box}
textarea{flex:1;font:inherit;min-height:3em}input{font:inherit;width:10em}
</style></head><body>
<header>MASHBOX Chat<small>${esc}</small></header>
<div id="log"></div>
<form id="f"><textarea id="q" placeholder="Message (Enter sends, Shift+Enter is a new line)"></textarea>
<input id="k" type="password" placeholder="API key (if any)"><button>Send</button></form>
<script>
const log=document.getElementById("log"),q=document.getElementById("q"),k=document.getElementById("k");
const history=[];
function add(role,text){const d=document.createElement("div");d.className="m "+role;d.textContent=text;log.appendChild(d);log.scrollTop=log.scrollHeight;return d;}
q.addEventListener("keydown",e=>{if(e.key==="Enter"&&!e.shiftKey){e.preventDefault();document.getElementById("f").requestSubmit();}});
document.getElementById("f").addEventListener("submit",async e=>{
  e.preventDefault();const text=q.value.trim();if(!text)return;q.value="";
  history.push({role:"user",content:text});add("user",text);const out=add("assistant","");
  const headers={"Content-Type":"application/json"};if(k.value)headers.Authorization="Bearer "+k.value;
  try{
    const r=await fetch("/v1/chat/completions",{method:"POST",headers,body:JSON.stringify({messages:history,stream:true})});
    if(!r.ok){const j=await r.json().catch(()=>({}));throw new Error((j.error&&j.error.message)||r.statusText);}
    const rd=r.body.getReader(),dec=new TextDecoder();let buf="",answer="";
    for(;;){const {value,done}=await rd.read();if(done)break;buf+=dec.decode(value,{stream:true});
      let i;while((i=buf.indexOf("\\n\\n"))>=0){const ev=buf.slice(0,i);buf=buf.slice(i+2);
        for(const line of ev.split("\\n")){if(!line.startsWith("data: "))continue;const d=line.slice(6);if(d==="[DONE]")continue;
          const c=JSON.parse(d);const delta=c.choices&&c.choices[0]&&c.choices[0].delta;
          if(delta&&delta.content){answer+=delta.content;out.textContent=answer;log.scrollTop=log.scrollHeight;}}}}
    history.push({role:"assistant",content:answer});
  }catch(err){out.className="m error";out.textContent=String(err.message||err);history.pop();}
});
</script></body></html>
`;
}
