// prom-client's parts, imported from their own files (metrics.ts): typed as its index types them.
declare module 'prom-client/lib/counter.js' {
  import { Counter } from 'prom-client';
  export default Counter;
}
declare module 'prom-client/lib/gauge.js' {
  import { Gauge } from 'prom-client';
  export default Gauge;
}
declare module 'prom-client/lib/histogram.js' {
  import { Histogram } from 'prom-client';
  export default Histogram;
}
declare module 'prom-client/lib/registry.js' {
  import { Registry } from 'prom-client';
  export default Registry;
}
/** One of prom-client's default metrics: registers itself with `register`. */
declare module 'prom-client/lib/metrics/*.js' {
  import type { Registry } from 'prom-client';
  const collect: (register: Registry, config: { eventLoopMonitoringPrecision?: number }) => void;
  export default collect;
}
