/** The seeded PRNG of the accuracy study (mulberry32), so a failing random test can be replayed from its seed. */
export { mulberry32 as seeded } from '../../bench/accuracy/random';
