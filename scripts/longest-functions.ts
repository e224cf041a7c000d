// Lists the longest functions of a folder: `node scripts/longest-functions.ts [src] [10]` (issue 63: ~80 lines at most, or a one-line reason).
import ts from 'typescript';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
const root = process.argv[2] ?? 'src';
const top = Number(process.argv[3] ?? 10);
const files: string[] = [];
const walk = (d: string): void => {
  for (const n of readdirSync(d)) {
    const p = join(d, n);
    if (statSync(p).isDirectory()) walk(p);
    else if (p.endsWith('.ts') && !p.endsWith('.d.ts')) files.push(p);
  }
};
walk(root);
const rows: { lines: number; where: string; name: string }[] = [];
for (const f of files) {
  const sf = ts.createSourceFile(f, readFileSync(f, 'utf8'), ts.ScriptTarget.Latest, true);
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      const start = sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1;
      const end = sf.getLineAndCharacterOfPosition(node.end).line + 1;
      let name = (node as ts.FunctionDeclaration).name?.getText(sf) ?? '';
      if (!name && ts.isVariableDeclaration(node.parent)) name = node.parent.name.getText(sf);
      if (!name && ts.isPropertyAssignment(node.parent)) name = node.parent.name.getText(sf);
      if (!name) name = '<anonymous>';
      const cls = ts.findAncestor(node.parent, ts.isClassDeclaration)?.name?.getText(sf);
      rows.push({
        lines: end - start + 1,
        where: `${relative('.', f)}:${start}`,
        name: cls ? `${cls}.${name}` : name,
      });
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
}
rows.sort((a, b) => b.lines - a.lines);
for (const r of rows.slice(0, top)) console.log(`${String(r.lines).padStart(4)}  ${r.name}  ${r.where}`);
