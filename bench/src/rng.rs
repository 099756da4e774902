//! xorshift64*: a small, fast, reproducible generator for the harnesses
//! that need seeded randomness (fuzzing, picking functions).

/// Advances `state` and returns the next value.
pub fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}
