//! The TMS booking: the truck-slot path's business row (the TMS bookings table, partition key
//! `source_event` = the event key), as the commit writes it with the record.

use gate::record::{BusinessRow, RowColumns};

/// The stored names of the TMS bookings table's own columns, as the deployed table has them and
/// the TMS reads them: `source_event` (the partition key, the event key), `slot_id` (the slot
/// the terminal issued), `booked_at` (epoch **milliseconds**). Truck-slot's
/// [`gate::Integration::row_columns`]: a deployed bookings table keeps working with no
/// migration. They are the core's [`RowColumns::LEGACY`], the names every business row had
/// before an integration named its own.
pub const BOOKING_COLUMNS: RowColumns = RowColumns::LEGACY;

/// A row of the TMS bookings table, read from the gate's generic [`BusinessRow`] (its labels are
/// the record's: `container`, `terminal`, `window_start`, `window_end`; its effect id is the slot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TmsBooking {
    /// The event key.
    pub source_event: String,
    /// The container (canonical ISO 6346).
    pub container: String,
    /// The slot the terminal issued.
    pub slot_id: String,
    /// The terminal code.
    pub terminal: String,
    /// Window start, RFC 3339 UTC.
    pub window_start: String,
    /// Window end, RFC 3339 UTC.
    pub window_end: String,
    /// When the booking was written, epoch milliseconds.
    pub booked_at_ms: i64,
}

impl From<&BusinessRow> for TmsBooking {
    fn from(row: &BusinessRow) -> Self {
        Self {
            source_event: row.source_event.clone(),
            container: row.label("container").to_string(),
            slot_id: row.effect_id.clone(),
            terminal: row.label("terminal").to_string(),
            window_start: row.label("window_start").to_string(),
            window_end: row.label("window_end").to_string(),
            booked_at_ms: row.written_at_ms,
        }
    }
}

impl From<BusinessRow> for TmsBooking {
    fn from(row: BusinessRow) -> Self {
        Self::from(&row)
    }
}
