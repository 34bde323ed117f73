/**
 * The view's page: a fixed skeleton with no data in it. The script (web/app.ts, served as
 * /ui/app.js) fills it from /api/state every second, putting every value in with textContent.
 * Relative URLs, so the page also works behind a path prefix (a proxy, kubectl port-forward).
 */
export const PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Spillway EPP</title>
<link rel="icon" href="ui/icon.svg" type="image/svg+xml">
<link rel="stylesheet" href="ui/uplot.css">
<link rel="stylesheet" href="ui/style.css">
<script src="ui/uplot.js" defer></script>
<script src="ui/app.js" type="module"></script>
</head>
<body>
<header>
  <h1>Spillway <span id="title"></span></h1>
  <div id="badges" class="badges"></div>
  <div id="error" class="error" hidden></div>
</header>
<main>
  <section aria-labelledby="zones-heading">
    <h2 id="zones-heading">Zones</h2>
    <p class="hint">Each zone's pods as this EPP sees them: figures from their latest metrics, expected wait and cost by the EPP's cost model. Chart, last minute: requests this EPP picked into the zone per second, and requests waiting in the zone.</p>
    <div id="zones" class="cards"></div>
  </section>
  <section aria-labelledby="spill-heading">
    <h2 id="spill-heading">Spill matrix</h2>
    <p class="hint">Requests per second over the last minute, from the gateway's zone (row) to the zone of the pod picked (column). Off the diagonal: spilled.</p>
    <table id="spill" class="matrix"></table>
  </section>
  <section aria-labelledby="pods-heading">
    <h2 id="pods-heading">Pods</h2>
    <p class="hint">Click a column to sort. Marked: <span class="tag stale">stale</span> no recent sample, <span class="tag suspect">suspect</span> stale while its zone reports, <span class="tag penalised">penalised</span> failed recently, <span class="tag full">full</span> past a hard limit, <span class="tag not-ready">not ready</span>.</p>
    <div class="pager"><button id="prev" type="button">Previous</button><span id="pods-range"></span><button id="next" type="button">Next</button></div>
    <table id="pods" class="pods"><thead></thead><tbody></tbody></table>
  </section>
  <section aria-labelledby="decisions-heading">
    <h2 id="decisions-heading">Decisions</h2>
    <p class="hint">The last picks, newest first: the rule, then each listed endpoint with why it is listed and its cost in milliseconds.</p>
    <table id="decisions" class="decisions"><thead></thead><tbody></tbody></table>
  </section>
  <section aria-labelledby="stream-heading">
    <h2 id="stream-heading">Event stream</h2>
    <dl id="stream" class="stream"></dl>
  </section>
</main>
</body>
</html>
`;

/** The tab's icon: served from this origin, since the security policy allows no data: URL. */
export const ICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" fill="#1d4ed8"/><path d="M3 5h10M3 8h7M3 11h4" stroke="#fff" stroke-width="2"/></svg>
`;
