// The chat page's Markdown, made safe by construction: every piece of the model's text becomes a
// DOM text node (createTextNode / textContent), never HTML, so nothing the model writes can run
// as markup or script. Links are made only for http:, https: and mailto: addresses; anything
// else (javascript:, data:, …) stays as the text it was. Covers what chat answers use: fenced
// code blocks (highlighted, with a Copy button), inline code, headings, lists, quotes, bold,
// italics, links, rules. No framework, nothing fetched. Exposes window.OcsMarkdown.render.
(function () {
  "use strict";

  var SAFE_LINK = /^(https?:\/\/|mailto:)[^\s]*$/i;
  var KEYWORDS = new Set(("and as assert async await break case catch class const continue def default del do elif else " +
    "enum except export extends false False final finally fn for from func function global go if impl import in " +
    "interface is lambda let loop match mod mut new nil None nonlocal not null or package pass private protected " +
    "public raise return self static struct super switch this throw true True try type typeof use var void while " +
    "with yield int float str bool char string double long boolean print console").split(" "));

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // Inline: `code`, **bold**, *italics* / _italics_, [text](http…). Everything else is text.
  // Underscores emphasise only outside words (snake_case and __dunder__ names stay as written).
  var INLINE = /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)|\*\*([^*]+)\*\*|(?<!\w)__([^_]+)__(?!\w)|\*([^*\s][^*]*)\*|(?<!\w)_([^_\s][^_]*)_(?!\w)|\[([^\]]+)\]\(([^)\s]+)\)/g;

  function inline(parent, text) {
    var last = 0, match, pattern = new RegExp(INLINE.source, "g");  // its own: bold and italics recurse
    while ((match = pattern.exec(text)) !== null) {
      if (match.index > last) parent.appendChild(document.createTextNode(text.slice(last, match.index)));
      if (match[1]) parent.appendChild(el("code", "", match[2]));
      else if (match[3] || match[4]) { var strong = el("strong"); inline(strong, match[3] || match[4]); parent.appendChild(strong); }
      else if (match[5] || match[6]) { var em = el("em"); inline(em, match[5] || match[6]); parent.appendChild(em); }
      else if (match[7]) {
        if (SAFE_LINK.test(match[8])) {
          var link = el("a", "", match[7]);
          link.href = match[8];  // a string the browser parses as a URL: the test above allows only these schemes
          link.rel = "noopener noreferrer nofollow";
          link.target = "_blank";
          parent.appendChild(link);
        } else {
          parent.appendChild(document.createTextNode(match[0]));  // shown as written, never a link
        }
      }
      last = pattern.lastIndex;
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
  }

  // A small highlighter for any language: comments, strings, numbers and common keywords.
  var TOKENS = /(\/\/[^\n]*|#[^\n]*|\/\*[\s\S]*?\*\/|<!--[\s\S]*?-->)|("(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|`(?:\\.|[^`\\])*`)|(\b\d+(?:\.\d+)?\b)|([A-Za-z_][A-Za-z0-9_]*)/g;

  function highlight(code, text, language) {
    var hashComments = /^(py|python|sh|bash|shell|zsh|ruby|rb|r|yaml|yml|toml|perl|ps1|powershell|dockerfile|make|makefile|conf|ini)$/i.test(language || "");
    var last = 0, match;
    TOKENS.lastIndex = 0;
    while ((match = TOKENS.exec(text)) !== null) {
      var kind = null;
      if (match[1]) kind = match[1].charAt(0) === "#" && !hashComments ? null : "tok-comment";
      else if (match[2]) kind = "tok-string";
      else if (match[3]) kind = "tok-number";
      else if (match[4] && KEYWORDS.has(match[4])) kind = "tok-keyword";
      if (!kind) continue;
      if (match.index > last) code.appendChild(document.createTextNode(text.slice(last, match.index)));
      code.appendChild(el("span", kind, match[0]));
      last = TOKENS.lastIndex;
    }
    if (last < text.length) code.appendChild(document.createTextNode(text.slice(last)));
  }

  function codeBlock(text, language) {
    var figure = el("div", "code-block");
    var bar = el("div", "code-bar");
    bar.appendChild(el("span", "code-lang", language || "code"));
    var copy = el("button", "code-copy", "Copy");
    copy.type = "button";
    copy.setAttribute("aria-label", "Copy the " + (language ? language + " " : "") + "code");
    bar.appendChild(copy);
    figure.appendChild(bar);
    var pre = el("pre"), code = el("code");
    pre.setAttribute("tabindex", "0");  // scrollable code is reachable with the keyboard
    highlight(code, text, language);
    pre.appendChild(code);
    figure.appendChild(pre);
    return figure;
  }

  // Blocks, line by line. An unclosed fence (an answer still streaming) runs to the end.
  function render(container, source) {
    container.textContent = "";
    var lines = String(source).replace(/\r\n?/g, "\n").split("\n");
    var i = 0, paragraph = [], list = null, listKind = "";

    function flushParagraph() {
      if (!paragraph.length) return;
      var p = el("p");
      paragraph.forEach(function (line, index) {
        if (index) p.appendChild(document.createElement("br"));
        inline(p, line);
      });
      container.appendChild(p);
      paragraph = [];
    }
    function endList() { list = null; listKind = ""; }

    while (i < lines.length) {
      var line = lines[i];
      var fence = /^\s*(```+|~~~+)\s*([\w+#.-]*)\s*$/.exec(line);
      if (fence) {
        flushParagraph(); endList();
        var body = [];
        i++;
        while (i < lines.length && lines[i].trim().indexOf(fence[1]) !== 0) { body.push(lines[i]); i++; }
        i++;
        container.appendChild(codeBlock(body.join("\n"), fence[2]));
        continue;
      }
      var heading = /^(#{1,6})\s+(.*)$/.exec(line);
      var bullet = /^\s*[-*+]\s+(.*)$/.exec(line);
      var numbered = /^\s*\d+[.)]\s+(.*)$/.exec(line);
      var quote = /^\s*>\s?(.*)$/.exec(line);
      if (heading) {
        flushParagraph(); endList();
        var h = el("h" + Math.min(6, heading[1].length + 2), "md-heading");  // under the page's own h1/h2
        inline(h, heading[2]);
        container.appendChild(h);
      } else if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
        flushParagraph(); endList();
        container.appendChild(el("hr"));
      } else if (bullet || numbered) {
        flushParagraph();
        var kind = bullet ? "ul" : "ol";
        if (!list || listKind !== kind) { list = el(kind); listKind = kind; container.appendChild(list); }
        var item = el("li");
        inline(item, (bullet || numbered)[1]);
        list.appendChild(item);
      } else if (quote) {
        flushParagraph(); endList();
        var block = el("blockquote");
        inline(block, quote[1]);
        container.appendChild(block);
      } else if (!line.trim()) {
        flushParagraph(); endList();
      } else {
        endList();
        paragraph.push(line);
      }
      i++;
    }
    flushParagraph();
  }

  window.OcsMarkdown = { render: render };
})();
