/*-------------------------------------------------------------------------
 *
 * launcher.h
 *	  The sweeper launcher, one background worker per cluster (launcher.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_LAUNCHER_H
#define DEDUP_LAUNCHER_H

extern PGDLLEXPORT void dedup_launcher_main(Datum main_arg);

#endif							/* DEDUP_LAUNCHER_H */
