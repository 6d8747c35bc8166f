//! `GET /api/v1/status/analytics`: messages written per time bucket (spec native-api §2.19).

/// Most buckets one answer holds: a minute interval over a week. A wider window is refused
/// rather than built.
pub const MAX_ANALYTICS_BUCKETS: i64 = 7 * 24 * 60;

/// The bucket widths the reference broker knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnalyticsInterval {
    Minute,
    Hour,
    Day,
}

impl AnalyticsInterval {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "minute" => Some(Self::Minute),
            "hour" => Some(Self::Hour),
            "day" => Some(Self::Day),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Minute => "minute",
            Self::Hour => "hour",
            Self::Day => "day",
        }
    }

    pub fn width_us(self) -> i64 {
        match self {
            Self::Minute => 60_000_000,
            Self::Hour => 3_600_000_000,
            Self::Day => 86_400_000_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnalyticsQuery {
    /// None: 24 hours before `to`.
    pub from_us: Option<i64>,
    /// None: the time of the engine cycle that answers.
    pub to_us: Option<i64>,
    pub interval: AnalyticsInterval,
    pub queue: Option<String>,
    pub namespace: Option<String>,
    pub task: Option<String>,
}

/// Every bucket from the one holding `from_us` to the one holding `to_us`, in time order,
/// with the messages written in it that are still held (retention removes counts with the
/// messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnalyticsSeries {
    pub interval: AnalyticsInterval,
    pub from_us: i64,
    pub to_us: i64,
    /// (bucket start, messages).
    pub points: Vec<(i64, u64)>,
}
