//! "Don't repeat yourself" (DRY) penalties for a free-text answer: a token that would extend a
//! sequence the answer already wrote is made less likely, the more so the longer the repeat.
//! Pure: token ids in, penalties out.
//!
//! Greedy decoding of a small base model falls into loops ("1. Create a Rust project." twenty
//! times, `import shutil` four times); the penalty is llama.cpp's DRY sampler's (multiplier
//! 0.8, base 1.75, repeats of up to 2 tokens free), applied to the answer's own tokens only, so
//! a name the prompt gives (a path, a function) can still be written.

/// A penalty starts at repeats this long: shorter ones (a word, `1.`) are free.
const ALLOWED: usize = 2;
/// The penalty for the shortest penalised repeat.
const MULTIPLIER: f32 = 0.8;
/// How much the penalty grows per token of the repeat.
const BASE: f32 = 1.75;
/// Longest repeat measured: the penalty stops growing there (and the work stays bounded).
const MOST: usize = 32;

/// For each token that would extend a repeat of at least [`ALLOWED`] tokens of `history` (the
/// answer so far), the penalty to subtract from its logit: `MULTIPLIER * BASE^(n - ALLOWED)`,
/// `n` the length of the repeat it would extend, the largest for each token.
pub(crate) fn penalties(history: &[i32]) -> Vec<(i32, f32)> {
    let n = history.len();
    let mut out: Vec<(i32, f32)> = Vec::new();
    let Some(&last) = history.last() else { return out };
    // Each earlier position `j` whose preceding tokens end like the history does: the token at
    // `j` would repeat what followed them.
    for j in 1..n {
        if history[j - 1] != last {
            continue;
        }
        let mut len = 0;
        while len < MOST && len < j && history[j - 1 - len] == history[n - 1 - len] {
            len += 1;
        }
        if len < ALLOWED {
            continue;
        }
        let penalty = MULTIPLIER * BASE.powi((len - ALLOWED) as i32);
        let token = history[j];
        match out.iter_mut().find(|(t, _)| *t == token) {
            Some((_, p)) if *p < penalty => *p = penalty,
            Some(_) => {}
            None => out.push((token, penalty)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeat_of_two_tokens_or_more_is_penalised_growing_with_its_length() {
        // "a b c a b" -> `c` would make "a b c" again.
        assert_eq!(penalties(&[1, 2, 3, 1, 2]), vec![(3, MULTIPLIER)]);
        // "a b c d a b c" -> `d` extends a repeat of three.
        let p = penalties(&[1, 2, 3, 4, 1, 2, 3]);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].0, 4);
        assert!((p[0].1 - MULTIPLIER * BASE).abs() < 1e-6, "{p:?}");
    }

    #[test]
    fn short_repeats_and_new_text_are_free() {
        assert!(penalties(&[]).is_empty());
        assert!(penalties(&[1, 2, 3, 4]).is_empty());
        // Only one token (`a`) repeats: below the allowed length.
        assert!(penalties(&[1, 2, 1]).is_empty());
    }

    #[test]
    fn a_token_s_penalty_is_its_longest_repeat_s() {
        // After "x a b", both `c` (from "a b c", a repeat of two) and `d` (from "x a b d", of
        // three) are penalised, `d` more.
        let p = penalties(&[1, 2, 3, 9, 1, 2, 4, 9, 1, 2]);
        let of = |t: i32| p.iter().find(|(x, _)| *x == t).map(|(_, p)| *p);
        assert_eq!(of(3), Some(MULTIPLIER));
        assert_eq!(of(4), Some(MULTIPLIER * BASE));
        let q = penalties(&[5, 1, 2, 3, 1, 2, 4, 5, 1, 2]);
        let of = |t: i32| q.iter().find(|(x, _)| *x == t).map(|(_, p)| *p);
        assert_eq!(of(3), Some(MULTIPLIER * BASE), "{q:?}");
        assert_eq!(of(4), Some(MULTIPLIER));
    }

    #[test]
    fn a_long_loop_s_penalty_stops_growing() {
        let history: Vec<i32> = (0..200).map(|i| i % 3).collect();
        let p = penalties(&history);
        assert!(p.iter().all(|(_, p)| p.is_finite()), "{p:?}");
        assert!(p.iter().any(|(_, p)| *p >= MULTIPLIER * BASE.powi((MOST - ALLOWED) as i32)));
    }
}
