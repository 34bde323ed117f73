/**
 * A chat template's rendering of *plain* conversations — an optional system message, then one or
 * more user messages, each nothing but a role and string content — learnt by probing the template,
 * so that such a conversation renders by splicing strings instead of running the Jinja interpreter
 * (which costs more than tokenizing the text it produces: ~150 µs for a 2,000-token system prompt
 * with Qwen3's template, against ~0.1 µs a token to encode it).
 *
 * The rule: render = open[first role] + c1 + glue[r1→r2] + c2 + … + cN + close[last role], where the
 * pieces come from rendering conversations of every plain shape with marker contents. It is kept
 * only if the pieces agree across shapes and the spliced text equals the template's for contents
 * chosen to catch what templates do to content (trimming, escaping, branching on it). It covers what
 * templates render the same whatever the conversation's length: which role comes first, which pairs
 * follow each other, which role ends it. A template that looks at positions beyond that (an index,
 * a count) fails the probes of a longer shape and gets no rule; the caller also compares the splice
 * with the template now and then (see ChatTemplate) and drops a rule that ever disagrees.
 */

/** Roles of a plain conversation: at most one system message, first; then users. */
type PlainRole = 'system' | 'user';

export interface PlainTurns {
  readonly open: Readonly<Record<PlainRole, string>>;
  readonly close: Readonly<Record<PlainRole, string>>;
  readonly systemToUser: string;
  readonly userToUser: string;
}

/** A message as the template is given it (content already flattened to text). */
export interface TextMessage {
  readonly role: string;
  readonly content: string;
}

/** The shapes probed: every first role, every pair and every last role, at two lengths. */
const SHAPES: readonly PlainRole[][] = [
  ['system'],
  ['user'],
  ['system', 'user'],
  ['user', 'user'],
  ['system', 'user', 'user'],
  ['user', 'user', 'user'],
];

/**
 * Contents the splice must reproduce in place: padding a template might trim, newlines and tabs,
 * non-ASCII, Jinja and special-token syntax a template might treat specially, the empty string.
 */
const CONTENTS: readonly string[] = [
  'Which novels by Tolstoy do you stock?',
  '  padded, with spaces  ',
  '\nLeading newline.\nSecond line.\n',
  'é 漢字 🚀 \t tab',
  '{{ not a variable }} {% raw %} </think> <|im_end|>',
  '',
];

const marker = (i: number) => `\u0000SPILLWAY-${i}\u0000`;

/** Whether a message is plain: a role and string content, nothing a template could also read. */
export function isPlain(message: object): boolean {
  for (const key in message) if (key !== 'role' && key !== 'content') return false;
  return true;
}

/**
 * The splice for `messages`, or undefined when they are not a plain conversation. `messages` must
 * be plain (isPlain) and have string content.
 */
export function splice(turns: PlainTurns, messages: ReadonlyArray<TextMessage>): string | undefined {
  const n = messages.length;
  if (n === 0) return undefined;
  const first = messages[0] as TextMessage;
  if (first.role !== 'system' && first.role !== 'user') return undefined;
  let text = turns.open[first.role] + first.content;
  for (let i = 1; i < n; i++) {
    const m = messages[i] as TextMessage;
    if (m.role !== 'user') return undefined;
    text += (i === 1 && first.role === 'system' ? turns.systemToUser : turns.userToUser) + m.content;
  }
  return text + turns.close[(messages[n - 1] as TextMessage).role as PlainRole];
}

/**
 * Learns the rule from `render` (the template, with the generation prompt as it is always rendered
 * here), or undefined when the template does not splice (or throws on a plain shape).
 */
export function probePlainTurns(render: (messages: ReadonlyArray<TextMessage>) => string): PlainTurns | undefined {
  const open: Partial<Record<PlainRole, string>> = {};
  const close: Partial<Record<PlainRole, string>> = {};
  const glue: Partial<Record<'systemToUser' | 'userToUser', string>> = {};
  const agree = <K extends string>(table: Partial<Record<K, string>>, key: K, value: string): boolean => {
    const known = table[key];
    if (known === undefined) table[key] = value;
    return known === undefined || known === value;
  };
  try {
    for (const shape of SHAPES) {
      const text = render(shape.map((role, i) => ({ role, content: marker(i) })));
      let at = 0;
      const pieces: string[] = [];
      for (let i = 0; i < shape.length; i++) {
        const found = text.indexOf(marker(i), at);
        if (found < 0) return undefined;
        pieces.push(text.slice(at, found));
        at = found + marker(i).length;
      }
      pieces.push(text.slice(at));
      if (pieces.some((p) => p.includes('\u0000SPILLWAY-'))) return undefined;
      if (!agree(open, shape[0] as PlainRole, pieces[0] as string)) return undefined;
      if (!agree(close, shape[shape.length - 1] as PlainRole, pieces[shape.length] as string)) return undefined;
      for (let i = 1; i < shape.length; i++) {
        const pair = shape[i - 1] === 'system' ? 'systemToUser' : 'userToUser';
        if (!agree(glue, pair, pieces[i] as string)) return undefined;
      }
    }
    const turns: PlainTurns = {
      open: { system: open.system as string, user: open.user as string },
      close: { system: close.system as string, user: close.user as string },
      systemToUser: glue.systemToUser as string,
      userToUser: glue.userToUser as string,
    };
    for (const shape of SHAPES) {
      for (let c = 0; c < CONTENTS.length; c++) {
        const messages = shape.map((role, i) => ({ role, content: CONTENTS[(c + i) % CONTENTS.length] as string }));
        if (splice(turns, messages) !== render(messages)) return undefined;
      }
    }
    return turns;
  } catch {
    // A template that refuses a plain shape (e.g. one that requires a system message): no rule.
    return undefined;
  }
}
