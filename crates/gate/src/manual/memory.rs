//! `MemoryManualQueue`: the [`ManualQueue`] in memory, for tests and the simulator.

use std::sync::Mutex;

use async_trait::async_trait;

use super::{ManualItem, ManualQueue, ManualQueueError};

/// An in-memory manual queue: keeps every item, in order.
#[derive(Debug, Default)]
pub struct MemoryManualQueue {
    items: Mutex<Vec<ManualItem>>,
}

impl MemoryManualQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every item sent so far, in order.
    pub fn items(&self) -> Vec<ManualItem> {
        self.items.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[async_trait]
impl ManualQueue for MemoryManualQueue {
    async fn send(&self, item: ManualItem) -> Result<(), ManualQueueError> {
        self.items
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(item);
        Ok(())
    }
}
