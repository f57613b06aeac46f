/*-------------------------------------------------------------------------
 *
 * audit.h
 *	  The audit trail (audit.c): one LOG line per record deleted or stream
 *	  position moved on purpose and per window change.  dedup_quote_literal
 *	  renders any untrusted string (names, ids) as a one-line SQL literal
 *	  that reads back as the original.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_AUDIT_H
#define DEDUP_AUDIT_H

#include "datatype/timestamp.h"

extern char *dedup_quote_literal(const char *str);
extern void dedup_audit_forget(text *consumer, text *message_id, bool found);
extern void dedup_audit_forget_since(text *consumer, TimestampTz since,
									 uint64 deleted);
extern void dedup_audit_sweep(text *consumer, TimestampTz cutoff,
							  uint64 deleted);
extern void dedup_audit_stream_position(text *consumer, text *stream,
										int32 partition, bool had_position,
										int64 previous, int64 next_offset);
extern void dedup_audit_forget_positions(text *consumer, text *stream,
										 uint64 deleted);

#endif							/* DEDUP_AUDIT_H */
