// zod as Berth uses it: `import * as z from '.../runtime/platform/zod.ts'`. The package's index
// loads every module it has, 64 locales among them, and most of its sources hold a character beyond
// ASCII, so V8 keeps them at two bytes a character: 1.5 MB of heap for a schema library. The build
// bundles this module alone (`npm run build`, scripts/bundle-zod.ts): only what is named here, its
// non-ASCII escaped (decision 0055). Only this module imports zod's values (the architecture test).
export {
  any,
  array,
  boolean,
  discriminatedUnion,
  email,
  enum,
  globalRegistry,
  int,
  literal,
  looseObject,
  number,
  object,
  prettifyError,
  record,
  string,
  unknown,
  ZodType,
} from 'zod';
export type { core, infer, input, output, RefinementCtx, ZodRawShape } from 'zod';
