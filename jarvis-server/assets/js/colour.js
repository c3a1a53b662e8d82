// Colour helpers of the Jarvis HUD: agent colours as RGB triples, blending
// between them, and the blend time the whole screen shares (R-HUD-3).

/** How long the screen takes to blend to a new agent's colour, in ms. */
export const BLEND_MS = 900;

/** `#rgb` or `#rrggbb` as `[r, g, b]`; anything else as the default cyan. */
export function parseHex(hex) {
  const text = String(hex || "").trim().replace(/^#/, "");
  const full = text.length === 3 ? text.replace(/./g, (c) => c + c) : text;
  if (!/^[0-9a-fA-F]{6}$/.test(full)) return [95, 200, 226];
  const n = parseInt(full, 16);
  return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
}

/** The colour `t` of the way from `a` to `b` (`t` in 0..1). */
export function mix(a, b, t) {
  return [a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t];
}

/** `[r, g, b]` as a CSS colour with `alpha`. */
export function rgba(c, alpha = 1) {
  return `rgba(${Math.round(c[0])}, ${Math.round(c[1])}, ${Math.round(c[2])}, ${alpha})`;
}

/** The CSS `ease-in-out` curve, closely enough for the canvas to keep pace. */
export function easeInOut(t) {
  const x = Math.min(1, Math.max(0, t));
  return x < 0.5 ? 4 * x * x * x : 1 - Math.pow(-2 * x + 2, 3) / 2;
}
