/** The view's style sheet, served as /ui/style.css (the security policy allows no inline style). */
export const STYLE_CSS = `:root {
  --fg: #1f2933; --muted: #616e7c; --line: #d9e2ec; --bg: #f5f7fa; --card: #fff;
  --ok: #2f855a; --warn: #b7791f; --bad: #c53030; --accent: #1d4ed8; --spill: #dd6b20;
  font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: var(--fg); background: var(--bg);
}
body { margin: 0; }
header { display: flex; flex-wrap: wrap; align-items: center; gap: 12px; padding: 10px 20px; background: var(--card); border-bottom: 1px solid var(--line); position: sticky; top: 0; z-index: 1; }
h1 { font-size: 18px; margin: 0; }
h1 span { font-weight: normal; color: var(--muted); }
h2 { font-size: 15px; margin: 0 0 4px; }
main { padding: 12px 20px 40px; display: grid; gap: 20px; }
section { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 12px 14px; overflow-x: auto; }
.hint { color: var(--muted); margin: 0 0 10px; font-size: 12px; }
.badges { display: flex; flex-wrap: wrap; gap: 6px; }
.badge { border-radius: 10px; padding: 1px 9px; font-size: 12px; border: 1px solid var(--line); background: var(--bg); }
.badge.ok { color: var(--ok); border-color: var(--ok); }
.badge.warn { color: var(--warn); border-color: var(--warn); }
.badge.bad { color: #fff; background: var(--bad); border-color: var(--bad); }
.error { color: #fff; background: var(--bad); padding: 2px 10px; border-radius: 4px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(300px, 1fr)); gap: 12px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 10px; }
.card.local { border-color: var(--accent); box-shadow: inset 3px 0 0 var(--accent); }
.card h3 { margin: 0 0 6px; font-size: 15px; display: flex; gap: 8px; align-items: baseline; flex-wrap: wrap; }
.card h3 small { color: var(--muted); font-weight: normal; }
.figures { display: grid; grid-template-columns: repeat(3, 1fr); gap: 4px 10px; margin: 0 0 6px; }
.figures div { display: flex; flex-direction: column; }
.figures dt { color: var(--muted); font-size: 11px; }
.figures dd { margin: 0; font-variant-numeric: tabular-nums; font-weight: 600; }
.chart { min-height: 110px; }
.legend { margin: 2px 0 0; font-size: 11px; color: var(--muted); display: flex; gap: 14px; }
.legend span::before { content: ""; display: inline-block; width: 14px; height: 0; border-top: 2px solid; vertical-align: middle; margin-right: 4px; }
.legend .picked::before { border-color: #1d4ed8; }
.legend .waiting::before { border-color: #dd6b20; }
caption.hint { text-align: left; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 8px; border-bottom: 1px solid var(--line); text-align: right; white-space: nowrap; }
th { color: var(--muted); font-weight: 600; font-size: 12px; }
td.text, th.text { text-align: left; }
table.pods th { cursor: pointer; user-select: none; }
table.pods th.sorted-asc::after { content: " \\25B2"; }
table.pods th.sorted-desc::after { content: " \\25BC"; }
table.pods tr.stale td { background: #fffbea; }
table.pods tr.penalised td, table.pods tr.suspect td { background: #fff5f5; }
table.pods tr.not-ready td { color: var(--muted); }
.tag { display: inline-block; border-radius: 3px; padding: 0 5px; margin-right: 3px; font-size: 11px; color: #fff; background: var(--muted); }
.tag.stale { background: var(--warn); }
.tag.suspect, .tag.penalised { background: var(--bad); }
.tag.full { background: var(--spill); }
.tag.silent { background: var(--bad); }
.tag.not-ready { background: var(--muted); }
table.matrix td.spill { color: var(--spill); font-weight: 600; }
table.matrix td.zero { color: var(--line); }
.pager { display: flex; gap: 10px; align-items: center; margin-bottom: 6px; }
table.decisions td { vertical-align: top; }
table.decisions ol { margin: 0; padding-left: 18px; text-align: left; }
.rule-spill { color: var(--spill); font-weight: 600; }
.rule-last-resort, .rule-shed { color: var(--bad); font-weight: 600; }
.stream { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 0; }
.stream dt { color: var(--muted); }
.stream dd { margin: 0; font-variant-numeric: tabular-nums; }
`;
