// The reactor of the Jarvis HUD: concentric rings and a slowly turning
// sphere of particles, drawn on a canvas in the attached agent's primary
// colour (R-HUD-1). While two or more agents work, the particles flow in
// bands of their colours (R-HUD-4); switching agents slides the sphere out
// to one side and brings it back from the other in the new colour while
// the rings blend (R-HUD-3, R-HUD-8); dragging the sphere 48 px or more, or
// the arrow keys on it, ask for the previous or next agent (R-HUD-6).
//
// The sphere is drawn into a pixel buffer (one write per particle, a depth
// byte per pixel) and copied onto the canvas once per frame: this keeps a
// few thousand particles cheap even where the browser renders in software.

import { BLEND_MS, easeInOut, mix, parseHex, rgba } from "./colour.js";

/** How far the sphere must be dragged to switch agents, in CSS pixels. */
export const DRAG_THRESHOLD = 48;

/** Particles in the normal mode and in the reduced mode (`?particles=low`). */
export const PARTICLES = { normal: 2400, low: 600 };

const TILT = 0.38; // the sphere's axis leans toward the viewer
const TURN = 0.00018; // radians per ms at rest
const WORK_TURN = 3; // how many times faster it turns while its agent works
const SPRING_MS = 260; // a short drag springs back this fast
const LEVELS = 16; // brightness levels of the particles, back to front
const GOLDEN = Math.PI * (3 - Math.sqrt(5));

const easeIn = (t) => t * t;
const easeOut = (t) => 1 - (1 - t) * (1 - t);

/** The reactor on one canvas. */
export class Reactor {
  /**
   * @param {HTMLCanvasElement} canvas
   * @param {{particles?: number, reducedMotion?: boolean, onSwipe?: (step: number) => void}} options
   *   `onSwipe(+1)` asks for the next agent, `onSwipe(-1)` for the previous one.
   */
  constructor(canvas, { particles = PARTICLES.normal, reducedMotion = false, onSwipe = () => {} } = {}) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d");
    this.sprite = document.createElement("canvas");
    this.spriteCtx = this.sprite.getContext("2d");
    this.reduced = reducedMotion;
    this.onSwipe = onSwipe;
    this.swipeEnabled = false;
    this.ring = parseHex("#5fc8e2"); // the rings' colour once any blend ends
    this.blend = null; // {from, to, start}
    this.slideAnim = null; // {dir, start, from, to, fromOffset}
    this.spring = null; // {from, start}
    this.drag = null; // {id, x0}
    this.offset = 0; // the sphere's sideways displacement, CSS px
    this.bands = [];
    this.working = false;
    this.speed = 1;
    this.angle = 0.6;
    this.clock = 0; // animation time in ms; stands still when motion is reduced
    this.last = 0;
    this.raf = 0;
    this.geom = null;
    this.setParticles(particles);
    this.resize();
    new ResizeObserver(() => {
      this.resize();
      this.request();
    }).observe(canvas);
    this.listen();
    this.request();
  }

  /** Uses `n` particles, spread evenly over the sphere. */
  setParticles(n) {
    this.count = Math.max(50, Math.floor(n));
    this.points = new Float32Array(this.count * 3);
    this.radii = new Float32Array(this.count);
    for (let i = 0; i < this.count; i++) {
      const y = 1 - (2 * (i + 0.5)) / this.count;
      const r = Math.sqrt(1 - y * y);
      const theta = i * GOLDEN;
      this.points[3 * i] = Math.cos(theta) * r;
      this.points[3 * i + 1] = y;
      this.points[3 * i + 2] = Math.sin(theta) * r;
      // A little unevenness in depth makes the surface shimmer.
      this.radii[i] = 0.955 + 0.045 * Math.abs(Math.sin(i * 12.9898) * 43758.5453 % 1);
    }
    this.maxDpr = this.count <= PARTICLES.low ? 1 : 2;
    this.resize();
    this.request();
  }

  /** Whether motion is reduced: no turning, pulsing or sliding. */
  setReducedMotion(reduced) {
    this.reduced = reduced;
    if (reduced) {
      this.slideAnim = null;
      this.spring = null;
      this.offset = 0;
    }
    this.request();
  }

  /**
   * Changes the agent colour. With `animate` the rings blend over the
   * screen's blend time; with `slide` (-1 out to the left, +1 out to the
   * right) the sphere leaves in the old colour and comes back from the other
   * side in the new one.
   */
  setColour(hex, { animate = false, slide = 0 } = {}) {
    const to = parseHex(hex);
    const now = performance.now();
    const from = this.ringAt(now);
    if (!animate) {
      this.ring = to;
      this.blend = null;
      this.slideAnim = null;
    } else {
      this.blend = { from, to, start: now };
      if (slide && !this.reduced) {
        const current = this.slideAnim ? this.placement(now, from).colour : from;
        this.slideAnim = { dir: slide, start: now, from: current, to, fromOffset: this.offset };
        this.offset = 0;
        this.spring = null;
      }
    }
    this.request();
  }

  /** The colours of the working agents: two or more flow in bands; fewer end the bands. */
  setBands(hexes) {
    this.bands = hexes.length >= 2 ? hexes.map(parseHex) : [];
    this.request();
  }

  /** Whether the attached agent works: the sphere turns faster and pulses. */
  setWorking(working) {
    this.working = working;
    this.request();
  }

  /** Schedules a frame. */
  request() {
    if (!this.raf) this.raf = requestAnimationFrame((now) => this.frame(now));
  }

  resize() {
    const rect = this.canvas.getBoundingClientRect();
    const dpr = Math.min(window.devicePixelRatio || 1, this.maxDpr || 2);
    const W = Math.max(1, Math.round(rect.width * dpr));
    const H = Math.max(1, Math.round(rect.height * dpr));
    if (this.geom && this.geom.W === W && this.geom.H === H) return;
    this.canvas.width = W;
    this.canvas.height = H;
    const Rmax = Math.max(8, Math.min(W, H) / 2 - 3 * dpr);
    const R = Rmax / 1.4;
    const S = Math.ceil(2 * R * 1.1) + 4;
    this.sprite.width = S;
    this.sprite.height = S;
    this.image = this.spriteCtx.createImageData(S, S);
    this.pixels = new Uint32Array(this.image.data.buffer);
    this.depth = new Uint8Array(S * S);
    this.geom = { W, H, dpr, cx: W / 2, cy: H / 2, Rmax, R, S, cssW: rect.width, Rcss: R / dpr };
  }

  /** The rings' colour at time `now`. */
  ringAt(now) {
    const b = this.blend;
    if (!b) return this.ring;
    const t = (now - b.start) / BLEND_MS;
    if (t >= 1) {
      this.ring = b.to;
      this.blend = null;
      return this.ring;
    }
    return mix(b.from, b.to, easeInOut(t));
  }

  /** Where the sphere is, how opaque, and in which colour. */
  placement(now, ring) {
    const s = this.slideAnim;
    if (s) {
      const p = (now - s.start) / BLEND_MS;
      if (p < 1) {
        const far = this.geom.cssW / 2 + this.geom.Rcss * 1.2;
        if (p < 0.5) {
          const q = easeIn(p / 0.5);
          return { dx: s.fromOffset + (s.dir * far - s.fromOffset) * q, alpha: 1 - q, colour: s.from };
        }
        const q = easeOut((p - 0.5) / 0.5);
        return { dx: -s.dir * far * (1 - q), alpha: q, colour: s.to };
      }
      this.slideAnim = null;
    }
    if (this.spring) {
      const p = (now - this.spring.start) / SPRING_MS;
      if (p >= 1) {
        this.spring = null;
        this.offset = 0;
      } else {
        this.offset = this.spring.from * (1 - easeOut(p));
      }
    }
    return { dx: this.offset, alpha: 1, colour: ring };
  }

  frame(now) {
    this.raf = 0;
    const dt = this.last ? Math.min(now - this.last, 100) : 16;
    this.last = now;
    if (!this.reduced) {
      const target = this.working ? WORK_TURN : 1;
      this.speed += (target - this.speed) * Math.min(1, dt / 500);
      this.angle += dt * TURN * this.speed;
      this.clock += dt;
    }
    this.draw(now);
    if (!this.reduced || this.blend || this.slideAnim || this.spring || this.drag) {
      this.request();
    } else {
      this.last = 0;
    }
  }

  draw(now) {
    const g = this.geom;
    const ctx = this.ctx;
    ctx.clearRect(0, 0, g.W, g.H);
    const ring = this.ringAt(now);
    const t = this.clock / 1000;
    const beat = this.working && !this.reduced ? Math.sin(t * 5.2) : 0;
    this.drawRings(ring, beat);
    const place = this.placement(now, ring);
    const palette = this.bands.length >= 2 ? this.bands : [place.colour];
    this.drawSphere(g.R * (1 + 0.035 * beat), palette, t);
    ctx.globalAlpha = Math.max(0, Math.min(1, place.alpha));
    ctx.drawImage(this.sprite, Math.round(g.cx + place.dx * g.dpr - g.S / 2), Math.round(g.cy - g.S / 2));
    ctx.globalAlpha = 1;
  }

  arc(r, from, to, style, width) {
    const { ctx, geom: g } = this;
    ctx.beginPath();
    ctx.arc(g.cx, g.cy, Math.max(1, r), from, to);
    ctx.strokeStyle = style;
    ctx.lineWidth = width;
    ctx.stroke();
  }

  drawRings(c, beat) {
    const { ctx, geom: g } = this;
    const d = g.dpr;
    const glow = this.working ? 0.5 + 0.5 * beat : 0;
    const TAU = Math.PI * 2;
    const core = ctx.createRadialGradient(g.cx, g.cy, g.R * 0.2, g.cx, g.cy, g.R * 1.4);
    core.addColorStop(0, rgba(c, 0.14 + 0.1 * glow));
    core.addColorStop(1, rgba(c, 0));
    ctx.fillStyle = core;
    ctx.beginPath();
    ctx.arc(g.cx, g.cy, g.R * 1.4, 0, TAU);
    ctx.fill();
    const inner = g.R * (1.1 + 0.02 * beat);
    this.arc(inner, 0, TAU, rgba(c, 0.07 + 0.08 * glow), 10 * d);
    this.arc(inner, 0, TAU, rgba(c, 0.85), 1.6 * d);
    const a = this.angle * 2.4;
    this.arc(g.R * 1.22, a, a + 1.2, rgba(c, 0.9), 3 * d);
    this.arc(g.R * 1.22, a + Math.PI, a + Math.PI + 0.55, rgba(c, 0.6), 3 * d);
    this.arc(g.R * 1.31, -a * 0.7, -a * 0.7 + 0.9, rgba(c, 0.5), 1.4 * d);
    ctx.setLineDash([1.5 * d, 5 * d]);
    ctx.lineDashOffset = -this.angle * 30 * d;
    this.arc(g.Rmax - 7 * d, 0, TAU, rgba(c, 0.5), 5 * d);
    ctx.setLineDash([]);
    this.arc(g.Rmax, 0, TAU, rgba(c, 0.4), 1.2 * d);
  }

  /** Draws the particles into the sprite: `palette` has one colour, or the bands' colours. */
  drawSphere(R, palette, t) {
    const { pixels, depth, points, radii, count } = this;
    const S = this.geom.S;
    const half = S / 2;
    pixels.fill(0);
    depth.fill(0);
    const packed = new Uint32Array(palette.length * LEVELS);
    palette.forEach((c, b) => {
      for (let l = 0; l < LEVELS; l++) {
        const light = 0.3 + 0.7 * Math.pow(l / (LEVELS - 1), 1.3);
        const r = Math.round(c[0] * light);
        const gg = Math.round(c[1] * light);
        const bb = Math.round(c[2] * light);
        packed[b * LEVELS + l] = ((255 << 24) | (bb << 16) | (gg << 8) | r) >>> 0;
      }
    });
    const bands = palette.length;
    const ca = Math.cos(this.angle);
    const sa = Math.sin(this.angle);
    const ct = Math.cos(TILT);
    const st = Math.sin(TILT);
    const big = this.geom.dpr >= 1.5 ? 2 : 1;
    const limit = S - big - 1;
    for (let i = 0; i < count; i++) {
      const x = points[3 * i];
      const y = points[3 * i + 1];
      const z = points[3 * i + 2];
      const x1 = x * ca + z * sa;
      const z1 = z * ca - x * sa;
      const y2 = y * ct - z1 * st;
      const z2 = y * st + z1 * ct;
      const r = R * radii[i];
      const px = (half + x1 * r) | 0;
      const py = (half + y2 * r) | 0;
      if (px < 0 || py < 0 || px > limit || py > limit) continue;
      const level = Math.min(LEVELS - 1, ((z2 + 1) * 0.5 * LEVELS) | 0);
      let band = 0;
      if (bands > 1) {
        let phase = y2 * 1.7 + Math.sin(x1 * 2.4 + t * 0.9) * 0.3 - t * 0.32;
        phase -= Math.floor(phase);
        band = Math.min(bands - 1, (phase * bands) | 0);
      }
      const colour = packed[band * LEVELS + level];
      const dl = level + 1;
      const size = level >= 11 ? big + 1 : big;
      for (let oy = 0; oy < size; oy++) {
        let k = (py + oy) * S + px;
        for (let ox = 0; ox < size; ox++, k++) {
          if (dl > depth[k]) {
            depth[k] = dl;
            pixels[k] = colour;
          }
        }
      }
    }
    this.spriteCtx.putImageData(this.image, 0, 0);
  }

  listen() {
    const c = this.canvas;
    c.addEventListener("pointerdown", (e) => {
      if (e.button !== 0 || !this.swipeEnabled || !this.geom) return;
      const r = c.getBoundingClientRect();
      const x = e.clientX - (r.left + r.width / 2);
      const y = e.clientY - (r.top + r.height / 2);
      if (Math.hypot(x, y) > this.geom.Rcss * 1.35) return;
      this.drag = { id: e.pointerId, x0: e.clientX };
      this.spring = null;
      c.setPointerCapture(e.pointerId);
      e.preventDefault();
    });
    c.addEventListener("pointermove", (e) => {
      if (!this.drag || e.pointerId !== this.drag.id) return;
      if (!this.reduced && !this.slideAnim) this.offset = e.clientX - this.drag.x0;
      this.request();
    });
    const end = (e, cancelled) => {
      if (!this.drag || e.pointerId !== this.drag.id) return;
      const dx = e.clientX - this.drag.x0;
      this.drag = null;
      if (!cancelled && Math.abs(dx) >= DRAG_THRESHOLD) {
        // Dragging to the left brings the next agent in from the right.
        this.onSwipe(dx < 0 ? 1 : -1);
      } else if (this.offset) {
        this.spring = { from: this.offset, start: performance.now() };
      }
      this.request();
    };
    c.addEventListener("pointerup", (e) => end(e, false));
    c.addEventListener("pointercancel", (e) => end(e, true));
    c.addEventListener("keydown", (e) => {
      if (!this.swipeEnabled) return;
      if (e.key === "ArrowLeft" || e.key === "ArrowRight") {
        e.preventDefault();
        this.onSwipe(e.key === "ArrowRight" ? 1 : -1);
      }
    });
  }
}
