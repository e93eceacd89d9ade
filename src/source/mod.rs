//! Inputs: Parquet files, Delta and Iceberg tables as Arrow batches, image folders and TFRecord
//! files, each in input order.

mod contain;
pub mod delta;
mod fixed_list;
pub mod hive;
pub mod iceberg;
pub mod images;
pub mod parquet;
pub mod table;
pub mod tfrecord;
