/**
 * A small hand-written SVG line chart: axes with ticks, a title, dashed or solid
 * series, horizontal reference lines and a legend. Output is plain SVG 1.1 text.
 */

/** One line of the chart, in data coordinates. */
export interface Series {
  readonly label: string;
  readonly color: string;
  /** SVG `stroke-dasharray`, e.g. "6 4"; solid when absent. */
  readonly dash?: string;
  readonly width?: number;
  readonly points: readonly (readonly [number, number])[];
}

/** A horizontal line across the plot, e.g. the limit. */
interface Rule {
  readonly label: string;
  readonly value: number;
  readonly color: string;
}

/** Everything the chart shows. */
export interface Chart {
  readonly title: string;
  readonly subtitle?: string;
  readonly xLabel: string;
  readonly yLabel: string;
  readonly series: readonly Series[];
  readonly rules?: readonly Rule[];
  readonly width?: number;
  readonly height?: number;
}

const MARGIN = { left: 72, right: 24, top: 64, bottom: 0 };
const AXIS_SPACE = 52;
const LEGEND_ROW = 20;
const FONT = 'font-family="Helvetica, Arial, sans-serif"';

/** Escapes text for use inside SVG elements and attributes. */
function escapeXml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

/**
 * Round tick positions covering [min, max]: steps of 1, 2 or 5 times a power of ten,
 * about `target` of them.
 *
 * @param min - lower end of the data range.
 * @param max - upper end of the data range (greater than `min`).
 * @param target - roughly how many ticks to produce.
 */
function niceTicks(min: number, max: number, target: number): number[] {
  const raw = (max - min) / Math.max(1, target);
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((candidate) => candidate >= raw) ?? 10 * power;
  const ticks: number[] = [];
  for (let tick = Math.ceil(min / step) * step; tick <= max + step * 1e-9; tick += step) {
    ticks.push(Number(tick.toPrecision(12)));
  }
  return ticks;
}

function formatTick(value: number): string {
  return Number.isInteger(value) ? value.toLocaleString('en-US') : String(Number(value.toPrecision(6)));
}

/** Pixel polyline of `points`, dropping points that would not change the drawing. */
function pathOf(points: readonly (readonly [number, number])[], x: (v: number) => number, y: (v: number) => number): string {
  const pixels: [number, number][] = [];
  for (const [px, py] of points) {
    const next: [number, number] = [Math.round(x(px) * 10) / 10, Math.round(y(py) * 10) / 10];
    const last = pixels[pixels.length - 1];
    if (last !== undefined && last[0] === next[0] && last[1] === next[1]) continue;
    // Collapse runs on one horizontal line: keep only their two ends.
    const beforeLast = pixels[pixels.length - 2];
    if (last !== undefined && beforeLast !== undefined && beforeLast[1] === last[1] && last[1] === next[1]) pixels.pop();
    pixels.push(next);
  }
  return pixels.map(([px, py], i) => `${i === 0 ? 'M' : 'L'}${px} ${py}`).join('');
}

/**
 * Renders `chart` as a standalone SVG document.
 *
 * @param chart - titles, series and reference lines; the axes fit the data and rules.
 * @returns the SVG text.
 */
export function renderChart(chart: Chart): string {
  const width = chart.width ?? 960;
  const legendItems = [
    ...chart.series.map((s) => ({ label: s.label, color: s.color, dash: s.dash })),
    ...(chart.rules ?? []).map((r) => ({ label: r.label, color: r.color, dash: '2 3' })),
  ];
  const legendColumns = 2;
  const legendHeight = Math.ceil(legendItems.length / legendColumns) * LEGEND_ROW + 12;
  const height = chart.height ?? 440 + legendHeight;
  const plotLeft = MARGIN.left;
  const plotRight = width - MARGIN.right;
  const plotTop = MARGIN.top;
  const plotBottom = height - MARGIN.bottom - AXIS_SPACE - legendHeight;

  let xMin = Infinity;
  let xMax = -Infinity;
  let yMax = 0;
  for (const series of chart.series) {
    for (const [px, py] of series.points) {
      if (px < xMin) xMin = px;
      if (px > xMax) xMax = px;
      if (py > yMax) yMax = py;
    }
  }
  for (const rule of chart.rules ?? []) if (rule.value > yMax) yMax = rule.value;
  if (!(xMax > xMin)) {
    xMin = 0;
    xMax = 1;
  }
  const yTicks = niceTicks(0, yMax * 1.08 || 1, 6);
  const yTop = Math.max(yTicks[yTicks.length - 1], yMax);
  const xTicks = niceTicks(xMin, xMax, 10);
  const x = (value: number): number => plotLeft + ((value - xMin) / (xMax - xMin)) * (plotRight - plotLeft);
  const y = (value: number): number => plotBottom - (value / yTop) * (plotBottom - plotTop);

  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">`);
  out.push(`<rect width="${width}" height="${height}" fill="#ffffff"/>`);
  out.push(`<text x="${width / 2}" y="26" text-anchor="middle" font-size="17" font-weight="bold" ${FONT}>${escapeXml(chart.title)}</text>`);
  if (chart.subtitle !== undefined) {
    out.push(`<text x="${width / 2}" y="46" text-anchor="middle" font-size="12" fill="#444" ${FONT}>${escapeXml(chart.subtitle)}</text>`);
  }

  // Grid and ticks.
  out.push('<g stroke="#e3e3e3" stroke-width="1">');
  for (const tick of yTicks) out.push(`<line x1="${plotLeft}" y1="${y(tick).toFixed(1)}" x2="${plotRight}" y2="${y(tick).toFixed(1)}"/>`);
  for (const tick of xTicks) out.push(`<line x1="${x(tick).toFixed(1)}" y1="${plotTop}" x2="${x(tick).toFixed(1)}" y2="${plotBottom}"/>`);
  out.push('</g>');
  out.push(`<g font-size="11" fill="#333" ${FONT}>`);
  for (const tick of yTicks)
    out.push(`<text x="${plotLeft - 6}" y="${(y(tick) + 4).toFixed(1)}" text-anchor="end">${formatTick(tick)}</text>`);
  for (const tick of xTicks)
    out.push(`<text x="${x(tick).toFixed(1)}" y="${plotBottom + 16}" text-anchor="middle">${formatTick(tick)}</text>`);
  out.push('</g>');

  // Axes and their labels.
  out.push(
    `<g stroke="#333" stroke-width="1"><line x1="${plotLeft}" y1="${plotBottom}" x2="${plotRight}" y2="${plotBottom}"/><line x1="${plotLeft}" y1="${plotTop}" x2="${plotLeft}" y2="${plotBottom}"/></g>`,
  );
  out.push(
    `<text x="${(plotLeft + plotRight) / 2}" y="${plotBottom + 38}" text-anchor="middle" font-size="13" ${FONT}>${escapeXml(chart.xLabel)}</text>`,
  );
  const yMid = (plotTop + plotBottom) / 2;
  out.push(
    `<text x="18" y="${yMid}" text-anchor="middle" font-size="13" transform="rotate(-90 18 ${yMid})" ${FONT}>${escapeXml(chart.yLabel)}</text>`,
  );

  // Data, clipped to the plot area.
  out.push(
    `<clipPath id="plot"><rect x="${plotLeft}" y="${plotTop - 2}" width="${plotRight - plotLeft}" height="${plotBottom - plotTop + 4}"/></clipPath>`,
  );
  out.push('<g clip-path="url(#plot)" fill="none" stroke-linejoin="round">');
  for (const rule of chart.rules ?? []) {
    out.push(
      `<line x1="${plotLeft}" y1="${y(rule.value).toFixed(1)}" x2="${plotRight}" y2="${y(rule.value).toFixed(1)}" stroke="${rule.color}" stroke-width="1.5" stroke-dasharray="2 3"/>`,
    );
  }
  for (const series of chart.series) {
    const dash = series.dash !== undefined ? ` stroke-dasharray="${series.dash}"` : '';
    out.push(`<path d="${pathOf(series.points, x, y)}" stroke="${series.color}" stroke-width="${series.width ?? 1.5}"${dash}/>`);
  }
  out.push('</g>');

  // Legend below the axis label, in columns.
  const legendTop = plotBottom + AXIS_SPACE + 8;
  const columnWidth = (plotRight - plotLeft) / legendColumns;
  out.push(`<g font-size="12" fill="#222" ${FONT}>`);
  legendItems.forEach((item, i) => {
    const left = plotLeft + (i % legendColumns) * columnWidth;
    const top = legendTop + Math.floor(i / legendColumns) * LEGEND_ROW;
    const dash = item.dash !== undefined ? ` stroke-dasharray="${item.dash}"` : '';
    out.push(`<line x1="${left}" y1="${top}" x2="${left + 30}" y2="${top}" stroke="${item.color}" stroke-width="2"${dash}/>`);
    out.push(`<text x="${left + 38}" y="${top + 4}">${escapeXml(item.label)}</text>`);
  });
  out.push('</g>');
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}
