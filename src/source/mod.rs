//! Inputs: Parquet tables (and, later, image folders) as Arrow batches in input order.

mod contain;
pub mod delta;
mod fixed_list;
pub mod hive;
pub mod images;
pub mod parquet;
pub mod tfrecord;
