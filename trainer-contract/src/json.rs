//! Parse errors of the JSON files SageMaker writes for a training job.

/// Why `text`, the content of a JSON configuration file (`hyperparameters.json`,
/// `resourceconfig.json`), did not parse: `it is empty; a JSON object was expected` when it
/// holds only whitespace (serde_json would say `EOF while parsing a value at line 1 column 0`,
/// a column number that points before the first character), else serde_json's message with
/// its line and column (1-based).
pub fn json_error(text: &str, error: &serde_json::Error) -> String {
    match text.trim().is_empty() {
        true => "it is empty; a JSON object was expected".to_string(),
        false => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(text: &str) -> String {
        let e = serde_json::from_str::<serde_json::Value>(text).unwrap_err();
        json_error(text, &e)
    }

    #[test]
    fn an_empty_file_is_said_empty_and_others_keep_the_parsers_position() {
        assert_eq!(error_of(""), "it is empty; a JSON object was expected");
        assert_eq!(error_of(" \n"), "it is empty; a JSON object was expected");
        let broken = error_of("{\"epochs\": }");
        assert!(broken.contains("line 1 column 12"), "{broken}");
    }
}
