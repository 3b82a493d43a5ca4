/** Global teardown of the `redis` project: stops the servers global-setup.ts started. */
export default async function globalTeardown(): Promise<void> {
  const stops = (globalThis as { __redisStops?: (() => Promise<void>)[] }).__redisStops ?? [];
  await Promise.all(stops.map((stop) => stop()));
}
