//! Which body a push carries and which answer a pop asks for (docs/binary-forms.md).

/// The body of a push (and of a transaction).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PushForm {
    /// The JSON body.
    Json,
    /// QPB1 without compression, every item with its transaction id (flag 4).
    Qpb1,
    /// QPB1 frames mode (flag 8): each group one zstd frame of stored frames, compressed
    /// here. Transactions go as QTB1, whose groups are the same.
    Qpb1Frames,
}

/// The answer a pop asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PopForm {
    /// The JSON answer.
    Json,
    /// The QPF1 framed answer (`frames=true`); a JSON answer then counts as an error, so a
    /// run never measures JSON under this name.
    Qpf1,
}

/// The forms one run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Forms {
    pub push: PushForm,
    pub pop: PopForm,
}

impl Default for Forms {
    fn default() -> Self {
        Self {
            push: PushForm::Json,
            pop: PopForm::Json,
        }
    }
}
