//! ECAPA-TDNN speaker encoder: 24 kHz audio -> mel -> x-vector.
