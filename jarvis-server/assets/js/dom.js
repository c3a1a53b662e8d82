// Small DOM helpers of the Jarvis HUD. Text always goes in as textContent,
// never as markup.

/** A new `tag` element with class `className` and text `text` (both optional). */
export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}
