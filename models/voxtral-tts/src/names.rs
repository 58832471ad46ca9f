//! The one place checkpoint names are translated. consolidated.safetensors uses Mistral's names
//! (`layers.3.attention.wq.weight`, `feed_forward.w1`); the shared blocks of infer-layers ask for
//! Hugging Face names (`self_attn.q_proj`, `mlp.gate_proj`). Every other block asks for the Mistral
//! name directly, as mlx-audio's `sanitize` keeps them.

/// The Mistral name of a tensor a block asks for.
pub fn mistral_name(name: &str) -> String {
    name.split('.')
        .map(|seg| match seg {
            "self_attn" => "attention",
            "q_proj" => "wq",
            "k_proj" => "wk",
            "v_proj" => "wv",
            "o_proj" => "wo",
            "mlp" => "feed_forward",
            "gate_proj" => "w1",
            "down_proj" => "w2",
            "up_proj" => "w3",
            other => other,
        })
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::mistral_name;

    #[test]
    fn hf_block_names_map_to_mistral_names() {
        assert_eq!(mistral_name("layers.3.self_attn.q_proj.weight"), "layers.3.attention.wq.weight");
        assert_eq!(mistral_name("layers.0.mlp.down_proj.weight"), "layers.0.feed_forward.w2.weight");
        assert_eq!(
            mistral_name("acoustic_transformer.layers.1.feed_forward.gate_proj.weight"),
            "acoustic_transformer.layers.1.feed_forward.w1.weight"
        );
        assert_eq!(mistral_name("norm.weight"), "norm.weight");
    }
}
